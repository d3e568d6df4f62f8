// sinkq/lowbit/kernels.cc — dispatch, threading and argument checks of lowbit/kernels.h; the
// load-time repack; the GEMM prologue (activation group sums, A4 widening, the partial last step).
//
// The serial inner loops are the per-ISA LowbitTables (table.h), picked from active_isa() on
// every call, so set_isa() / SINKQ_ISA take effect immediately.
#include "lowbit/kernels.h"


#include <algorithm>
#include <bit>
#include <cfenv>
#include <cfloat>
#include <cmath>
#include <cstring>

#include <mutex>

#include "core/error.h"
#include "kernels/kernel_table.h"
#include "kernels/ops.h"
#include "kernels/team.h"
#include "lowbit/table.h"

namespace sinkq::lowbit {
namespace detail {

bool cpu_has_avx512_vnni() {
  static const bool v = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512vnni") != 0;
  }();
  return v;
}

const LowbitTable& table_for(Isa isa) {
  switch (isa) {
    case Isa::Avx512: return cpu_has_avx512_vnni() ? table_avx512() : table_avx2();
    case Isa::Avx2: return table_avx2();
    case Isa::Scalar: break;
  }
  return table_scalar();
}

const LowbitTable& table() { return table_for(active_isa()); }

}  // namespace detail

namespace {

using detail::GemmArgs;
using detail::LowbitTable;

using sinkq::detail::threads_for;  // kernels/ops.cc's threading policy (team-aware)

// Codes are integers and rne is the quantizer's rounding: refuse another rounding mode.
void check_rounding_mode() { SINKQ_ASSERT(std::fegetround() == FE_TONEAREST); }

int64_t param_rows(const FormatDesc& t, int64_t rows) {
  return t.granularity == quant::Granularity::PerTensor ? 1 : rows;
}

// The arrays of an activation tensor fit its shape (x may come from anywhere).
void check_activations(const PackedTensor& x, const char* who) {
  const FormatDesc& t = x.info();
  SINKQ_CHECK(t.role == Role::Activation, "lowbit {}: {} is a weight format, expected activations", who, t.name);
  SINKQ_CHECK(x.rows >= 0 && x.cols > 0 && x.codes.size() == size_t(x.rows * row_bytes(t, x.cols)) &&
                  x.scales.size() == size_t(param_rows(t, x.rows)) && x.zeros.empty(),
              "lowbit {}: {} activations [{}, {}] with {} code bytes and {} scales do not fit the format",
              who, t.name, x.rows, x.cols, x.codes.size(), x.scales.size());
}

// The -128 list of 8-bit kernel weights indexes real rows and columns, block by block (kernels.h).
bool neg128_ok(const KernelWeights& w, const FormatDesc& t, int64_t nb) {
  if (t.bits != 8 || w.neg128_start.empty()) return w.neg128.empty();
  if (w.neg128_start.size() != size_t(nb + 1) || w.neg128_start[0] != 0 || w.neg128_start.back() != w.neg128.size())
    return false;
  for (int64_t b = 0; b < nb; ++b) {
    if (w.neg128_start[size_t(b)] > w.neg128_start[size_t(b + 1)]) return false;
    for (uint32_t e = w.neg128_start[size_t(b)]; e < w.neg128_start[size_t(b + 1)]; ++e)
      if (int64_t(w.neg128[e] >> 4) >= w.cols || b * 16 + (w.neg128[e] & 15) >= w.rows) return false;
  }
  return true;
}

// out sized for [tokens, cols] of format f (vectors keep their capacity across calls).
void prepare(PackedTensor& out, const FormatDesc& t, int64_t tokens, int64_t cols) {
  out.format = t.format;
  out.rows = tokens;
  out.cols = cols;
  out.codes.resize(size_t(tokens * row_bytes(t, cols)));
  out.scales.resize(size_t(param_rows(t, tokens)));
  out.zeros.clear();
}

}  // namespace

std::string_view kernel_isa_name() {
  const LowbitTable& k = detail::table();
  if (&k == &detail::table_avx512()) return "avx512-vnni";
  if (&k == &detail::table_avx2()) return "avx2";
  return "scalar";
}

// ---- activation quantization --------------------------------------------------------------

void quantize_dynamic(PackedFormat f, const float* x, int64_t tokens, int64_t cols, float clip_ratio,
                      PackedTensor& out) {
  const FormatDesc& t = traits(f);
  SINKQ_CHECK(t.role == Role::Activation && t.granularity == quant::Granularity::PerRow,
              "lowbit quantize_dynamic: {} is not a per-token activation format", t.name);
  quant::validate(quant_spec(f, clip_ratio), tokens, cols);
  check_rounding_mode();
  prepare(out, t, tokens, cols);
  const LowbitTable& k = detail::table();
  const int64_t rb = row_bytes(t, cols);
  const float denom = float((1 << (t.bits - 1)) - 1);
  int64_t bad = tokens;  // first token with a non-finite value
  // Token i: the abs-max pass, then the quantize pass over the same (now cached) row. Returns
  // false for a non-finite row (compute_params would throw).
  auto token = [&](int64_t i, int64_t end) {
    const float* row = x + i * cols;
    const uint32_t m = k.absmax_bits(row, cols);
    if (m > 0x7f7fffffu) return false;
    // Exactly Calibrator::params(): s = guard((clip · absmax) / (2^(N-1) - 1)).
    const float s = quant::detail::guard_scale((clip_ratio * std::bit_cast<float>(m)) / denom);
    out.scales[size_t(i)] = s;
    k.quantize_row(row, cols, s, t.bits, out.codes.data() + i * rb, i + 1 < end ? row + cols : nullptr);
    return true;
  };
  const int nt = threads_for(0.3 * double(tokens) * double(cols));
  if (nt == 1) {  // no OpenMP region: its fork/join costs more than a decode row
    for (int64_t i = 0; i < tokens; ++i)
      if (!token(i, tokens)) {
        bad = i;
        break;
      }
  } else {
    std::mutex bad_mu;
    // Contiguous token ranges per thread, so each prefetches its own next row.
    parallel_ranges(nt, tokens, 1, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i)
        if (!token(i, i1)) {
          std::lock_guard<std::mutex> lock(bad_mu);
          bad = std::min(bad, i);
          break;
        }
    });
  }
  if (bad < tokens) {
    const float* row = x + bad * cols;
    int64_t j = 0;
    while (std::isfinite(row[j])) ++j;
    fail("lowbit quantize_dynamic: non-finite value {} at token {}, feature {}", row[j], bad, j);
  }
}

void quantize_static(PackedFormat f, const float* x, int64_t tokens, int64_t cols,
                     const quant::Params& p, PackedTensor& out) {
  const FormatDesc& t = traits(f);
  SINKQ_CHECK(t.role == Role::Activation && t.granularity == quant::Granularity::PerTensor,
              "lowbit quantize_static: {} is not a per-tensor activation format", t.name);
  quant::validate(quant_spec(f), tokens, cols);
  SINKQ_CHECK(p.granularity == quant::Granularity::PerTensor && p.symmetric && p.bits == t.bits &&
                  p.prow == 1 && p.pcol == 1 && p.cols() == cols && p.scale.size() == 1,
              "lowbit quantize_static: params (int{} {} {}, {} columns) were not calibrated for {} on {} columns",
              p.bits, p.symmetric ? "sym" : "asym", quant::granularity_name(p.granularity), p.cols(), t.name, cols);
  const float s = p.scale[0];
  SINKQ_CHECK(s >= FLT_MIN && s <= FLT_MAX, "lowbit quantize_static: scale {} is not a positive normal fp32", s);
  check_rounding_mode();
  prepare(out, t, tokens, cols);
  out.scales[0] = s;
  const LowbitTable& k = detail::table();
  const int64_t rb = row_bytes(t, cols);
  const int nt = threads_for(0.25 * double(tokens) * double(cols));
  if (nt == 1) {  // one call over the whole tensor when rows are contiguous (8-bit, or even cols)
    if (t.bits == 8 || cols % 2 == 0) return k.quantize_row(x, tokens * cols, s, t.bits, out.codes.data(), nullptr);
    for (int64_t i = 0; i < tokens; ++i) k.quantize_row(x + i * cols, cols, s, t.bits, out.codes.data() + i * rb, nullptr);
    return;
  }
  parallel_ranges(nt, tokens, 1, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) k.quantize_row(x + i * cols, cols, s, t.bits, out.codes.data() + i * rb, nullptr);
  });
}

void quantize_rows(PackedFormat f, const float* x, int64_t tokens, int64_t cols, const float* scales,
                   PackedTensor& out) {
  const FormatDesc& t = traits(f);
  SINKQ_CHECK(t.role == Role::Activation && t.granularity == quant::Granularity::PerRow,
              "lowbit quantize_rows: {} is not a per-token activation format", t.name);
  quant::validate(quant_spec(f), tokens, cols);
  for (int64_t i = 0; i < tokens; ++i)
    SINKQ_CHECK(scales[i] >= FLT_MIN && scales[i] <= FLT_MAX,
                "lowbit quantize_rows: token {}'s scale {} is not a positive normal fp32", i, scales[i]);
  check_rounding_mode();
  prepare(out, t, tokens, cols);
  std::copy(scales, scales + tokens, out.scales.begin());
  const LowbitTable& k = detail::table();
  const int64_t rb = row_bytes(t, cols);
  const int nt = threads_for(0.25 * double(tokens) * double(cols));
  auto rows = [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i)
      k.quantize_row(x + i * cols, cols, scales[i], t.bits, out.codes.data() + i * rb, i + 1 < i1 ? x + (i + 1) * cols : nullptr);
  };
  if (nt == 1)
    rows(0, tokens);
  else
    parallel_ranges(nt, tokens, 1, rows);
}

// ---- repack -------------------------------------------------------------------------------

KernelWeights repack(const PackedTensor& w) {
  const FormatDesc& t = w.info();
  SINKQ_CHECK(t.role == Role::Weight, "lowbit repack: {} is an activation format, expected weights", t.name);
  SINKQ_CHECK(w.rows > 0 && w.cols > 0 && w.cols <= kMaxCols,
              "lowbit repack: {} weights [{}, {}]: need rows >= 1 and 1 <= cols <= {} (int32-exact accumulation)",
              t.name, w.rows, w.cols, kMaxCols);
  const std::vector<int8_t> q = unpack_codes(w);  // checks the code array's size
  const quant::Params p = params_of(w);           // checks scales / zeros
  KernelWeights kw;
  kw.format = w.format;
  kw.rows = w.rows;
  kw.cols = w.cols;
  kw.groups = w.groups();
  const int step = t.bits == 4 ? 8 : 4;
  kw.steps = (w.cols + step - 1) / step;
  const int64_t nb = (w.rows + 15) / 16, ng = kw.groups;
  kw.codes.assign(size_t(nb * kw.steps * 64), 0);
  kw.scales.assign(size_t(nb * ng * 16), 0.0f);
  if (!t.symmetric) kw.zeros.assign(size_t(nb * ng * 16), 0);
  if (t.bits == 8) kw.neg128_start.assign(size_t(nb + 1), 0);
  for (int64_t r = 0; r < w.rows; ++r) {
    const int64_t b = r / 16, i = r % 16;
    uint8_t* blk = kw.codes.data() + b * kw.steps * 64 + i * 4;
    for (int64_t c = 0; c < w.cols; ++c) {
      const int code = q[size_t(r * w.cols + c)];
      const int64_t s = c / step, j = c % step;
      uint8_t& byte = blk[s * 64 + j % 4];
      if (t.bits == 8) {
        byte = uint8_t(code + 128);
        if (code == -128) kw.neg128.push_back(uint32_t(c << 4 | i));
      } else {
        byte = uint8_t(byte | ((code + 8) << (j < 4 ? 0 : 4)));
      }
    }
    if (t.bits == 8) kw.neg128_start[size_t(b + 1)] = uint32_t(kw.neg128.size());  // block b ends here so far
    for (int64_t g = 0; g < ng; ++g) {
      kw.scales[size_t((b * ng + g) * 16 + i)] = p.scale[size_t(r * ng + g)];
      if (!t.symmetric) kw.zeros[size_t((b * ng + g) * 16 + i)] = p.zero[size_t(r * ng + g)];
    }
  }
  if (kw.neg128.empty()) kw.neg128_start.clear();
  return kw;
}

// ---- GEMM ---------------------------------------------------------------------------------

void gemm(const PackedTensor& x, const KernelWeights& w, const float* bias, float* y) {
  const GemmOut one{&w, bias, y};
  gemm_multi(x, std::span(&one, 1));
}

void gemm_multi(const PackedTensor& x, std::span<const GemmOut> outs) {
  const FormatDesc& xt = x.info();
  check_activations(x, "gemm");
  SINKQ_CHECK(!outs.empty(), "lowbit gemm: no weight matrices");
  SINKQ_CHECK(outs.size() <= kMaxGemmOuts, "lowbit gemm: at most {} weight matrices per call, got {}", kMaxGemmOuts,
              outs.size());
  const PackedFormat wf = outs[0].w->format;
  const FormatDesc& wt = traits(wf);
  SINKQ_CHECK(wt.role == Role::Weight, "lowbit gemm: {} is an activation format, expected weights", wt.name);
  const int step = wt.bits == 4 ? 8 : 4;
  const int64_t T = x.rows, K = x.cols;
  for (const GemmOut& o : outs) {
    const KernelWeights& w = *o.w;
    SINKQ_CHECK(w.format == wf, "lowbit gemm: one call takes weights of one format, got {} and {}", wt.name,
                traits(w.format).name);
    const int64_t N = w.rows, nb = (N + 15) / 16;
    SINKQ_CHECK(w.cols == K, "lowbit gemm: activations have {} features, {} weights [{}, {}] expect {}", x.cols,
                wt.name, N, w.cols, w.cols);
    SINKQ_CHECK(N > 0 && K <= kMaxCols && w.steps == (K + step - 1) / step &&
                    w.groups == (wt.group > 0 ? K / wt.group : 1) &&
                    w.codes.size() == size_t(nb * w.steps * 64) && w.scales.size() == size_t(nb * w.groups * 16) &&
                    w.zeros.size() == (wt.symmetric ? 0 : w.scales.size()) && neg128_ok(w, wt, nb),
                "lowbit gemm: {} kernel weights [{}, {}] are not in the repack() layout", wt.name, N, K);
  }
  if (T == 0) return;

  // Prologue, O(T·K), per token, once for every matrix (one format: one group layout): int8
  // activation codes (A4 widened), per-group code sums for the zero-offset correction, the
  // zero-padded partial last step. Scratch of the calling thread.
  static thread_local std::vector<int8_t> wide;
  static thread_local std::vector<int32_t> xsum;
  static thread_local std::vector<uint8_t> xtail;
  const bool a4 = xt.bits == 4, grouped = wt.group > 0;
  const int64_t ng = grouped ? K / wt.group : 1, gcols = grouped ? wt.group : K;
  const int64_t full = K / step, rem = K % step;  // per-group: rem == 0 (group % 32 == 0)
  if (a4) wide.resize(size_t(T * K));
  xsum.resize(size_t(T * ng));
  if (rem) xtail.assign(size_t(T * 8), 0);
  // Raw pointers: inside the parallel region the thread_local names would be the workers' own.
  int8_t* const widened = wide.data();
  int32_t* const sums = xsum.data();
  uint8_t* const tails = xtail.data();
  const int8_t* codes = a4 ? widened : reinterpret_cast<const int8_t*>(x.codes.data());
  parallel_ranges(threads_for(double(T) * double(K) * (a4 ? 1.0 : 0.25)), T, 1, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      if (a4) {
        const uint8_t* src = x.codes.data() + i * row_bytes(xt, K);
        for (int64_t j = 0; j < K; ++j) widened[i * K + j] = lowbit::detail::nibble_code(src[j / 2], j % 2 == 1);
      }
      for (int64_t g = 0; g < ng; ++g) {
        const int8_t* c = codes + i * K + g * gcols;
        int32_t s = 0;
        for (int64_t j = 0; j < gcols; ++j) s += c[j];
        sums[i * ng + g] = s;
      }
      if (rem) std::memcpy(tails + i * 8, codes + i * K + full * step, size_t(rem));
    }
  });

  // One GemmArgs per matrix; work items of row blocks over all of them.
  GemmArgs args[kMaxGemmOuts];
  int64_t nbs[kMaxGemmOuts];
  double ns = 0.0;
  int64_t nb_all = 0;
  for (size_t m = 0; m < outs.size(); ++m) {
    const KernelWeights& w = *outs[m].w;
    GemmArgs& a = args[m];
    a.w4 = wt.bits == 4;
    a.grouped = grouped;
    a.asym = !wt.symmetric;
    a.w = w.codes.data();
    a.ws = w.scales.data();
    a.wz = a.asym ? w.zeros.data() : nullptr;
    a.out = w.rows;
    a.neg128_start = w.neg128_start.empty() ? nullptr : w.neg128_start.data();
    a.neg128 = w.neg128.data();
    a.steps = w.steps;
    a.groups = ng;
    a.steps_per_group = grouped ? wt.group / step : full;
    a.tail = rem != 0;
    a.T = T;
    a.x = codes;
    a.ldx = K;
    a.xtail = rem ? tails : nullptr;
    a.xsum = sums;
    a.xs = x.scales.data();
    a.xs_stride = xt.granularity == quant::Granularity::PerTensor ? 0 : 1;
    a.bias = outs[m].bias;
    a.y = outs[m].y;
    nbs[m] = (w.rows + 15) / 16;
    nb_all += nbs[m];
    // ~20 GB/s of weight bytes per core (decode) and ~64 int8 MACs per ns per core (prefill).
    ns += double(w.codes.size()) / 20.0 + double(T) * double(w.rows) * double(K) / 64.0;
  }

  const LowbitTable& k = detail::table();
  const int nt = threads_for(ns);
  if (nt == 1) {
    for (size_t m = 0; m < outs.size(); ++m) k.gemm(args[m], 0, nbs[m]);
    return;
  }
  // Work items of 4..16 row blocks (64..256 rows; multiples of every ISA's blocks per tile),
  // ~8 per thread, handed out dynamically (a thread that loses its core delays one item); each
  // item within one matrix, so a row's result is the same whatever the split (independent of
  // the thread count and of which matrices share the call).
  int64_t per = nb_all / (int64_t(nt) * 8);
  per = std::clamp<int64_t>(per / 4 * 4, 4, 16);
  int64_t first[kMaxGemmOuts + 1];  // matrix m's items are [first[m], first[m + 1])
  first[0] = 0;
  for (size_t m = 0; m < outs.size(); ++m) first[m + 1] = first[m] + (nbs[m] + per - 1) / per;
  const size_t nm = outs.size();
  parallel_for(nt, first[nm], 1, [&](int64_t it, int64_t) {
    size_t m = 0;
    while (it >= first[m + 1]) ++m;
    const int64_t b0 = (it - first[m]) * per;
    k.gemm(args[m], b0, std::min(nbs[m], b0 + per));
  });
}

// ---- reference ----------------------------------------------------------------------------

namespace ref {

void gemm(const PackedTensor& x, const PackedTensor& w, const float* bias, float* y) {
  const FormatDesc& xt = x.info();
  const FormatDesc& wt = w.info();
  check_activations(x, "ref::gemm");
  SINKQ_CHECK(wt.role == Role::Weight, "lowbit ref::gemm: {} is an activation format, expected weights", wt.name);
  SINKQ_CHECK(x.cols == w.cols && w.cols <= kMaxCols, "lowbit ref::gemm: activations have {} features, weights {}",
              x.cols, w.cols);
  const std::vector<int8_t> cx = unpack_codes(x), cw = unpack_codes(w);
  const quant::Params pw = params_of(w);
  const int64_t T = x.rows, N = w.rows, K = w.cols, ng = w.groups(), gcols = K / ng;
  const bool grouped = wt.group > 0;
  for (int64_t t = 0; t < T; ++t) {
    const float sx = x.scales[size_t(xt.granularity == quant::Granularity::PerTensor ? 0 : t)];
    const int8_t* xr = cx.data() + t * K;
    for (int64_t r = 0; r < N; ++r) {
      const int8_t* wr = cw.data() + r * K;
      float v;
      if (!grouped) {
        int32_t acc = 0;
        for (int64_t k = 0; k < K; ++k) acc += int32_t(xr[k]) * wr[k];
        const float p = sx * pw.scale[size_t(r)];
        v = p * float(acc);
      } else {
        float f = 0.0f;
        for (int64_t g = 0; g < ng; ++g) {
          // Weight level: symmetric c; asymmetric q - z = c + 8 - z.
          const int32_t off = wt.symmetric ? 0 : 8 - pw.zero[size_t(r * ng + g)];
          int32_t acc = 0;
          for (int64_t k = g * gcols; k < (g + 1) * gcols; ++k) acc += int32_t(xr[k]) * (wr[k] + off);
          f = f + pw.scale[size_t(r * ng + g)] * float(acc);
        }
        v = sx * f;
      }
      y[t * N + r] = bias ? v + bias[r] : v;
    }
  }
}

}  // namespace ref
}  // namespace sinkq::lowbit
