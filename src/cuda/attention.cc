// sinkq/cuda/attention.cc — the host side of cuda/attention.h.
#include "cuda/attention.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"
#include "cuda/check.h"
#include "cuda/attention_kernels.h"
#include "cuda/ops_kernels.h"
#include "lowbit/formats.h"

namespace sinkq::cuda {

using detail::check;

DeviceKvLayer::DeviceKvLayer(const lowbit::PackedKvCache& c, int layer)
    : kv_heads_(c.kv_heads()), head_dim_(c.head_dim()), capacity_(c.capacity()) {
  SINKQ_CHECK(layer >= 0 && layer < c.num_layers(), "cuda attention: layer {} of {}", layer, c.num_layers());
  const lowbit::FormatDesc& t = c.info();
  dynamic_ = t.dynamic(), symmetric_ = t.symmetric;
  per_head_ = t.granularity == quant::Granularity::PerHead || t.granularity == quant::Granularity::PerHeadShared;
  const int64_t nparam = lowbit::kv_param_count(t, kv_heads_, capacity_);
  for (const bool value : {false, true}) {
    Side& side = value ? v_ : k_;
    const lowbit::KvRows r0 = c.rows(layer, value, 0);
    side.ld = r0.ld, side.ls = r0.ls, side.bits = r0.bits;
    side.head_step = kv_heads_ > 1 ? c.rows(layer, value, 1).scale - r0.scale : 0;
    side.codes = DeviceBuffer(size_t(capacity_ * r0.ld));
    side.codes.upload(r0.codes, side.codes.bytes());
    side.scales = DeviceBuffer(size_t(nparam) * sizeof(float));
    side.scales.upload(r0.scale, side.scales.bytes());
    if (r0.zero) {
      side.zeros = DeviceBuffer(size_t(nparam));
      side.zeros.upload(r0.zero, side.zeros.bytes());
    }
  }
}

void DeviceKvLayer::store(int64_t row0, const float* k, const float* v, int64_t T) {
  SINKQ_CHECK(row0 >= 0 && T >= 0 && row0 + T <= capacity_, "cuda KV store: rows [{}, {}) outside the capacity of {}",
              row0, row0 + T, capacity_);
  SINKQ_CHECK(T == 0 || (k && v), "cuda KV store: K or V without its device pointer");
  if (T == 0) return;
  if (bad_.bytes() == 0) bad_ = DeviceBuffer(sizeof(int64_t));
  const int64_t C = int64_t(kv_heads_) * head_dim_;
  const int64_t spans = per_head_ ? kv_heads_ : 1;
  for (int64_t t0 = 0; t0 < T;) {  // the grid's 2^31 - 1 blocks
    const int64_t n = std::min<int64_t>(T - t0, int64_t(0x7fffffff) / spans);
    for (const bool value : {false, true}) {
      Side& side = value ? v_ : k_;
      const float* x = (value ? v : k) + t0 * C;
      bad_.upload(&n, sizeof n);
      detail::KvStoreArgs a;
      a.x = x, a.T = n, a.row0 = row0 + t0;
      a.kv_heads = kv_heads_, a.head_dim = head_dim_, a.bits = side.bits;
      a.symmetric = symmetric_, a.per_head = per_head_, a.fixed = !dynamic_;
      a.codes = side.codes.as<uint8_t>(), a.scales = side.scales.as<float>(), a.zeros = side.zeros.as<uint8_t>();
      a.bad_row = bad_.as<int64_t>();
      detail::launch_kv_store(a, nullptr);
      check(cudaGetLastError(), "kv store launch");
      check(cudaDeviceSynchronize(), "kv store");
      if (!dynamic_) continue;  // static formats refuse nothing (quantize_to_int clamps)
      int64_t bad = n;
      bad_.download(&bad, sizeof bad);
      if (bad < n) {
        std::vector<float> row(static_cast<size_t>(C));
        check(cudaMemcpy(row.data(), x + bad * C, size_t(C) * sizeof(float), cudaMemcpyDeviceToHost), "cudaMemcpy D2H");
        int64_t j = 0;
        while (j < C && std::isfinite(row[size_t(j)])) ++j;
        fail("cuda KV store: non-finite value {} in {} at row {}, col {}", j < C ? row[size_t(j)] : NAN,
             value ? "V" : "K", row0 + t0 + bad, j);
      }
    }
    t0 += n;
  }
}

DeviceKvLayer::HostArrays DeviceKvLayer::download(bool value) const {
  const Side& side = value ? v_ : k_;
  HostArrays h;
  h.codes.resize(side.codes.bytes());
  side.codes.download(h.codes.data(), h.codes.size());
  h.scales.resize(side.scales.bytes() / sizeof(float));
  side.scales.download(h.scales.data(), side.scales.bytes());
  h.zeros.resize(side.zeros.bytes());
  side.zeros.download(h.zeros.data(), h.zeros.size());
  return h;
}

size_t DeviceKvLayer::bytes() const {
  size_t n = 0;
  for (const Side* s : {&k_, &v_}) n += s->codes.bytes() + s->scales.bytes() + s->zeros.bytes();
  return n;
}

namespace {

// The checks both bodies share: the shape against the body's and the kernels' limits, the rows
// against the body's, the pointers.
void check_call(const AttnShape& s, int kv_heads, int head_dim, int64_t body_rows, const float* q,
                const float* prefix_k, const float* prefix_v, int64_t P, int64_t n_past, int64_t T, const float* out) {
  SINKQ_CHECK(s.n_heads > 0 && s.n_kv_heads == kv_heads && s.n_heads % s.n_kv_heads == 0 && s.head_dim == head_dim,
              "cuda attention: {} heads over {} kv heads of {} against a body of {} x {}", s.n_heads, s.n_kv_heads,
              s.head_dim, kv_heads, head_dim);
  SINKQ_CHECK(s.n_heads / s.n_kv_heads <= detail::kAttnMaxHeads && s.head_dim <= detail::kAttnMaxHeadDim,
              "cuda attention: {} query heads per kv head, head_dim {}: the kernels take <= {} and <= {}",
              s.n_heads / s.n_kv_heads, s.head_dim, detail::kAttnMaxHeads, detail::kAttnMaxHeadDim);
  SINKQ_CHECK(T >= 1 && n_past >= 0 && P >= 0 && n_past + T <= body_rows,
              "cuda attention: rows [0, {}) beyond the body's {}", n_past + T, body_rows);
  SINKQ_CHECK(q && out && (P == 0 || (prefix_k && prefix_v)), "cuda attention: {} without its device pointer",
              !q ? "q" : !out ? "out" : "a prefix of rows");
}

// Splits: enough for the most keys any token of the call sees. Tokens in chunks so the partials
// stay within 256 MiB and the grid within 65,535 blocks a column. Synchronous.
template <class Args, class Launch>
void run_splits(const AttnShape& s, int64_t P, int64_t n_past, int64_t T, const float* q, const float* q_body,
                float* out, DeviceBuffer& scratch, Args& a, Launch launch) {
  const int64_t max_keys = P + n_past + T;
  const int64_t keys = s.sliding_window > 0 ? std::min<int64_t>(max_keys, s.sliding_window) : max_keys;
  a.nsplit = int((keys + detail::kAttnSplitRows - 1) / detail::kAttnSplitRows);
  const int64_t per_token = int64_t(s.n_heads) * a.nsplit * (s.head_dim + 2) * int64_t(sizeof(float));
  const int64_t chunk = std::max<int64_t>(1, std::min<int64_t>({T, (int64_t(256) << 20) / per_token,
                                                                 65535 / s.n_kv_heads}));
  if (scratch.bytes() < size_t(chunk * per_token)) scratch = DeviceBuffer(size_t(chunk * per_token));
  a.part = scratch.as<float>();
  const int64_t HD = int64_t(s.n_heads) * s.head_dim;
  for (int64_t t0 = 0; t0 < T; t0 += chunk) {
    a.T = std::min(chunk, T - t0);
    a.n_past = n_past + t0;
    a.q = q + t0 * HD;
    if constexpr (requires { a.q_body; }) a.q_body = q_body ? q_body + t0 * HD : nullptr;
    a.out = out + t0 * HD;
    launch(a);
    check(cudaGetLastError(), "attention launch");
  }
  check(cudaDeviceSynchronize(), "attention");
}

}  // namespace

void attention_packed(const AttnShape& s, const float* q, const float* prefix_k, const float* prefix_v, int64_t P,
                      const DeviceKvLayer& body, int64_t n_past, int64_t T, float* out, DeviceBuffer& scratch) {
  check_call(s, body.kv_heads(), body.head_dim(), body.capacity(), q, prefix_k, prefix_v, P, n_past, T, out);
  detail::AttnArgs a;
  a.n_heads = s.n_heads, a.n_kv_heads = s.n_kv_heads, a.head_dim = s.head_dim, a.window = s.sliding_window;
  a.scale = s.score_scale(), a.softcap = s.softcap;
  a.pk = prefix_k, a.pv = prefix_v, a.P = P;
  for (const bool value : {false, true}) {
    const DeviceKvLayer::Side& side = value ? body.v_ : body.k_;
    detail::KvBodyDev& d = value ? a.v : a.k;
    d.codes = side.codes.as<uint8_t>(), d.ld = side.ld, d.scale = side.scales.as<float>(), d.ls = side.ls;
    d.head_step = side.head_step, d.zero = side.zeros.as<uint8_t>(), d.bits = side.bits;
  }
  run_splits(s, P, n_past, T, q, nullptr, out, scratch, a, [](const detail::AttnArgs& x) { detail::launch_attention(x, nullptr); });
}

// ---- The codebook body ---------------------------------------------------------------------

DeviceCbLayer::DeviceCbLayer(const lowbit::CodebookKvCache& c, int layer, int head_dim)
    : kv_heads_(head_dim > 0 ? int(c.kv_dim() / head_dim) : 0), head_dim_(head_dim), rows_(c.rows_written(layer)) {
  SINKQ_CHECK(head_dim > 0 && c.kv_dim() % head_dim == 0, "cuda codebook KV: head_dim {} does not divide kv_dim {}",
              head_dim, c.kv_dim());
  for (const bool value : {false, true}) {
    const lowbit::CbRows r = c.rows(layer, value, 0, head_dim);  // throws for a bad layer / alignment
    Part p;
    p.codes = r.codes, p.ld = r.ld, p.bits = r.bits, p.levels = r.levels;
    p.ch_scale = r.ch_scale, p.ch_zero = r.ch_zero, p.row_sz = r.row_sz;
    p.row_ptr = r.row_ptr, p.col = r.col, p.val = r.val;
    upload(value ? v_ : k_, p);
  }
}

DeviceCbLayer::DeviceCbLayer(int kv_heads, int head_dim, int64_t rows, const Part& k, const Part& v)
    : kv_heads_(kv_heads), head_dim_(head_dim), rows_(rows) {
  SINKQ_CHECK(kv_heads > 0 && head_dim > 0 && rows >= 0, "cuda codebook KV: {} kv heads of {}, {} rows", kv_heads,
              head_dim, rows);
  upload(k_, k);
  upload(v_, v);
}

void DeviceCbLayer::upload(Side& side, const Part& p) {
  const int64_t kv_dim = int64_t(kv_heads_) * head_dim_;
  SINKQ_CHECK(p.bits >= 2 && p.bits <= 4 && int64_t(head_dim_) * p.bits % 8 == 0 && p.ld * 8 >= kv_dim * p.bits,
              "cuda codebook KV: {}-bit rows of {} bytes for {} channels (head_dim {} must fill whole bytes)", p.bits,
              p.ld, kv_dim, head_dim_);
  SINKQ_CHECK(p.codes && p.levels && p.row_ptr && (p.ch_scale ? p.ch_zero != nullptr : p.row_sz != nullptr),
              "cuda codebook KV: a part without its codes, levels, ranges or outlier rows");
  const auto put = [](DeviceBuffer& b, const void* src, size_t bytes) {
    b = DeviceBuffer(std::max<size_t>(bytes, 1));
    if (bytes) b.upload(src, bytes);
  };
  side.ld = p.ld, side.bits = p.bits;
  put(side.codes, p.codes, size_t(rows_ * p.ld + lowbit::detail::kCodeSlack));
  put(side.levels, p.levels, 16 * sizeof(float));
  if (p.ch_scale) {
    put(side.ch_scale, p.ch_scale, size_t(kv_dim + 16) * sizeof(float));
    put(side.ch_zero, p.ch_zero, size_t(kv_dim + 16) * sizeof(float));
  } else {
    put(side.row_sz, p.row_sz, size_t(2 * rows_) * sizeof(float));
  }
  put(side.row_ptr, p.row_ptr, size_t(rows_ + 1) * sizeof(uint32_t));
  const size_t entries = p.row_ptr[rows_];
  SINKQ_CHECK(entries == 0 || (p.col && p.val), "cuda codebook KV: {} outliers without their arrays", entries);
  put(side.col, p.col, entries * sizeof(uint16_t));
  put(side.val, p.val, entries * sizeof(uint16_t));
}

size_t DeviceCbLayer::bytes() const {
  size_t n = 0;
  for (const Side* s : {&k_, &v_})
    for (const DeviceBuffer* b : {&s->codes, &s->levels, &s->ch_scale, &s->ch_zero, &s->row_sz, &s->row_ptr, &s->col, &s->val})
      n += b->bytes();
  return n;
}

void attention_codebook(const AttnShape& s, const float* q, const float* q_body, const float* prefix_k,
                        const float* prefix_v, int64_t P, const DeviceCbLayer& body, int64_t n_past, int64_t T,
                        const float* cs, float* out, DeviceBuffer& scratch) {
  check_call(s, body.kv_heads(), body.head_dim(), body.rows(), q, prefix_k, prefix_v, P, n_past, T, out);
  SINKQ_CHECK(s.head_dim % 2 == 0, "cuda codebook attention: head_dim {} is odd", s.head_dim);
  // The dynamic carve-up plus the kernel's static max / sum arrays.
  const int64_t smem = int64_t(detail::attention_codebook_smem(s.n_heads / s.n_kv_heads, s.head_dim)) +
                       2 * detail::kAttnMaxHeads * int64_t(sizeof(float));
  const int64_t limit = detail::max_block_smem();
  SINKQ_CHECK(smem <= limit, "cuda codebook attention: {} bytes of shared memory a block; this device gives {}", smem,
              limit);
  detail::CbAttnArgs a;
  a.n_heads = s.n_heads, a.n_kv_heads = s.n_kv_heads, a.head_dim = s.head_dim, a.window = s.sliding_window;
  a.scale = s.score_scale(), a.softcap = s.softcap;
  a.pk = prefix_k, a.pv = prefix_v, a.P = P, a.cs = cs;
  for (const bool value : {false, true}) {
    const DeviceCbLayer::Side& side = value ? body.v_ : body.k_;
    detail::CbBodyDev& d = value ? a.v : a.k;
    d.codes = side.codes.as<uint8_t>(), d.ld = side.ld, d.bits = side.bits, d.levels = side.levels.as<float>();
    d.ch_scale = side.ch_scale.bytes() ? side.ch_scale.as<float>() : nullptr;
    d.ch_zero = side.ch_zero.bytes() ? side.ch_zero.as<float>() : nullptr;
    d.row_sz = side.row_sz.bytes() ? side.row_sz.as<float>() : nullptr;
    d.row_ptr = side.row_ptr.as<uint32_t>(), d.col = side.col.as<uint16_t>(), d.val = side.val.as<uint16_t>();
  }
  run_splits(s, P, n_past, T, q, q_body, out, scratch, a,
             [](const detail::CbAttnArgs& x) { detail::launch_attention_codebook(x, nullptr); });
}

}  // namespace sinkq::cuda
