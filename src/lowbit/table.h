// sinkq/lowbit/table.h — internal: the per-ISA serial kernels behind lowbit/kernels.cc.
//
// Each ISA provides one LowbitTable: the GEMM from the same templated source (gemm_kernels.inc)
// instantiated with that ISA's 16-row integer-dot traits, and the activation quantizer rows.
// The tables are serial; kernels.cc splits work over OpenMP threads. Not part of the public API.
#pragma once

#include <cstdint>

#include "kernels/cpu_features.h"

namespace sinkq::lowbit::detail {

// One GEMM call, everything the serial kernel reads (prepared by kernels.cc).
struct GemmArgs {
  // Weights (KernelWeights layout).
  bool w4 = false;             // 4-bit (8 columns per step) or 8-bit (4 columns per step)
  bool grouped = false;        // per-group scales (else one scale per row: another fp32 order)
  bool asym = false;           // zeros present (per-group 4-bit only)
  const uint8_t* w = nullptr;  // [blocks][steps][64]
  const float* ws = nullptr;   // [blocks][groups][16]
  const int32_t* wz = nullptr; // [blocks][groups][16] or nullptr
  int64_t out = 0;             // rows (output features)
  int64_t steps = 0;           // steps per block
  int64_t groups = 1;          // scales per row (1 for per-row weights)
  int64_t steps_per_group = 0; // full steps per group (per-row: cols / step columns)
  bool tail = false;           // per-row only: one more, partial step (x from xtail)
  const uint32_t* neg128_start = nullptr;  // 8-bit: KernelWeights::neg128_start / neg128, or
                                           // nullptr when there is no code -128
  const uint32_t* neg128 = nullptr;
  // Activations: int8 codes, row stride ldx; the partial last step zero-padded in xtail.
  int64_t T = 0;
  const int8_t* x = nullptr;
  int64_t ldx = 0;
  const uint8_t* xtail = nullptr;  // [T][8]
  const int32_t* xsum = nullptr;   // [T][groups]: Σ of the codes of each group
  const float* xs = nullptr;       // scale of token t: xs[t * xs_stride]
  int64_t xs_stride = 0;
  const float* bias = nullptr;     // [out] or nullptr
  float* y = nullptr;              // [T][out]
};

// ---- activation quantization by a reciprocal -------------------------------------------------
// The definition divides: level = clamp(rne(RN(x / s)), lo, hi) (quant::detail::level). A division
// is the slowest vector instruction on the quantizer's path, so the SIMD rows compute
// v = RN(x · r) with r = RN(1 / s) and keep rne(clamp(v)) unless v lies near a rounding boundary,
// where they divide. Why that is exact (u = 2^-24, the fp32 unit roundoff):
//   - r is normal when s is in [2^-96, 2^96] (recip_ok), so r = (1/s)(1 + e1) and, while x·r is
//     normal, v = (x/s)(1 + e1)(1 + e2); the quotient q = RN(x/s) = (x/s)(1 + e3), |ei| <= u.
//     Hence |v - q| <= (3u + 3u² + u³)|x/s| < 3.01u·|v|.
//   - rne(v) != rne(q) needs a half-integer h between v and q (inclusive: a tie rounds to even),
//     so |v - h| < 3.01u·|v|. After clamping to [lo, hi] (|lo|, |hi| <= 128) that is
//     < 3.01·2^-24·128 < 2.3e-5 < kTieMargin; a lane with |clamp(v) - rne(clamp(v))| <
//     0.5 - kTieMargin therefore has rne(clamp(v)) == rne(clamp(q)) (= clamp(rne(q)): the
//     bounds are integers and rne is monotone).
//   - A clamped lane: v >= hi gives q >= v(1 - 3.01u) > hi - 1/2, so both are hi (and the same for
//     lo); clamp(v) is then an integer, never flagged. x·r below the normal range (|x/s| < 2^-126)
//     rounds to 0 like q. Non-finite x: ±inf give ±inf in both; NaN gives NaN in both, which the
//     max-with-lo maps to lo as the definition does.
// Lanes are flagged with probability ~2·kTieMargin (2.4e-4 for smooth data); exact ties such as
// x = (k + 1/2)·s are flagged and divided. Tested against quantize_to_int (act_quant_test.cc).
inline constexpr float kTieMargin = 1.0f / 8192;  // 1.2e-4, > 5x the bound above
inline bool recip_ok(float s) { return s >= 0x1p-96f && s <= 0x1p96f; }

struct LowbitTable {
  // Rows [16·b0, min(out, 16·b1)) of y for all T tokens.
  void (*gemm)(const GemmArgs& a, int64_t b0, int64_t b1);
  // max over k < n of the bit pattern of |x[k]| (0x7f800000 for inf, above for NaN).
  uint32_t (*absmax_bits)(const float* x, int64_t n);
  // q[k] = quant::detail::level(x[k], s, lo, hi) for k < n (lo = -2^(N-1), hi = 2^(N-1)-1); bits 8:
  // one int8 per byte; bits 4: packed nibbles (formats/uniform_int.h), ceil(n/2) bytes. next: nullptr, or n
  // floats to prefetch into the cache while this row is quantized (the dynamic quantizer's next
  // token, so its abs-max pass does not wait for memory).
  void (*quantize_row)(const float* x, int64_t n, float s, int bits, uint8_t* q, const float* next);
};

const LowbitTable& table_scalar();
const LowbitTable& table_avx2();
const LowbitTable& table_avx512();  // requires AVX512-VNNI
bool cpu_has_avx512_vnni();
const LowbitTable& table_for(Isa isa);  // Avx512 without VNNI -> the AVX2 table
const LowbitTable& table();             // table_for(active_isa())

}  // namespace sinkq::lowbit::detail
