// sinkq/cuda/attention.cc — the host side of cuda/attention.h.
#include "cuda/attention.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"
#include "cuda/check.h"
#include "cuda/attention_kernels.h"
#include "lowbit/formats.h"

namespace sinkq::cuda {

using detail::check;

DeviceKvLayer::DeviceKvLayer(const lowbit::PackedKvCache& c, int layer)
    : kv_heads_(c.kv_heads()), head_dim_(c.head_dim()), capacity_(c.capacity()) {
  SINKQ_CHECK(layer >= 0 && layer < c.num_layers(), "cuda attention: layer {} of {}", layer, c.num_layers());
  const lowbit::FormatDesc& t = c.info();
  dynamic_ = t.dynamic(), symmetric_ = t.symmetric, per_head_ = t.granularity == quant::Granularity::PerHead;
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
  SINKQ_CHECK(dynamic_, "cuda KV store: a static format's params are calibrated on the CPU (store there, then upload)");
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
      a.symmetric = symmetric_, a.per_head = per_head_;
      a.codes = side.codes.as<uint8_t>(), a.scales = side.scales.as<float>(), a.zeros = side.zeros.as<uint8_t>();
      a.bad_row = bad_.as<int64_t>();
      detail::launch_kv_store(a, nullptr);
      check(cudaGetLastError(), "kv store launch");
      check(cudaDeviceSynchronize(), "kv store");
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

void attention_packed(const AttnShape& s, const float* q, const float* prefix_k, const float* prefix_v, int64_t P,
                      const DeviceKvLayer& body, int64_t n_past, int64_t T, float* out, DeviceBuffer& scratch) {
  SINKQ_CHECK(s.n_heads > 0 && s.n_kv_heads == body.kv_heads() && s.n_heads % s.n_kv_heads == 0 &&
                  s.head_dim == body.head_dim(),
              "cuda attention: {} heads over {} kv heads of {} against a body of {} x {}", s.n_heads, s.n_kv_heads,
              s.head_dim, body.kv_heads(), body.head_dim());
  SINKQ_CHECK(s.n_heads / s.n_kv_heads <= detail::kAttnMaxHeads && s.head_dim <= detail::kAttnMaxHeadDim,
              "cuda attention: {} query heads per kv head, head_dim {}: the kernels take <= {} and <= {}",
              s.n_heads / s.n_kv_heads, s.head_dim, detail::kAttnMaxHeads, detail::kAttnMaxHeadDim);
  SINKQ_CHECK(T >= 1 && n_past >= 0 && P >= 0 && n_past + T <= body.capacity(),
              "cuda attention: rows [0, {}) beyond the body's {}", n_past + T, body.capacity());
  SINKQ_CHECK(q && out && (P == 0 || (prefix_k && prefix_v)), "cuda attention: {} without its device pointer",
              !q ? "q" : !out ? "out" : "a prefix of rows");
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
  // Splits: enough for the most keys any token of the call sees. Tokens in chunks so the partials
  // stay within 256 MiB and the grid within 65,535 blocks a column.
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
    a.out = out + t0 * HD;
    detail::launch_attention(a, nullptr);
    check(cudaGetLastError(), "attention launch");
  }
  check(cudaDeviceSynchronize(), "attention");
}

}  // namespace sinkq::cuda
