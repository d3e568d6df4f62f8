// sinkq/cuda/linear_math.h — the arithmetic of the device's packed linear layer (cuda/linear_kernels.cu)
// as plain functions that the host compiles too.
//
// The device kernels read lowbit::KernelWeights as the CPU kernels do (lowbit/kernels.h: 16-row
// blocks of 64-byte steps; 8-bit u = c + 128, 4-bit u = c + 8 or the asymmetric q) and must give
// lowbit::ref::gemm's results bit for bit. Everything that decides those bits is here, compiled
// for the host by every C++ compiler and for the device by nvcc (SINKQ_HD): the integer dot of
// one thread's 16-byte share of a step, the weight-level correction, and the fp32 folds in the
// CPU's order, each product and sum rounded once (no FMA contraction). tests/cuda/linear_math_test.cc
// replays the kernel's decomposition (thread shares, warp and group reductions) on the host with
// these functions against lowbit::ref::gemm; the device test holds the kernels to the same bits.
//
// Integer sums are exact (|Σ| < 2^31 for K <= lowbit::kMaxCols), so the order in which threads
// add their shares does not matter; the fp32 order is fixed by the functions below.
#pragma once

#include <cfloat>
#include <cstdint>

#include "formats/device.h"

namespace sinkq::cuda::math {

// Threads per block of the device linear, and what each one covers: one 16-byte quarter (rows
// 4q..4q+3) of one 64-byte step, kQuarters per step, kStepsPerPass consecutive steps a pass.
inline constexpr int kThreads = 128;
inline constexpr int kQuarters = 4;
inline constexpr int kStepsPerPass = kThreads / kQuarters;  // 32

// fp32 product / sum rounded once each: the CPU kernels' order under -ffp-contract=off.
SINKQ_HD inline float mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
SINKQ_HD inline float add_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}

// quant::detail::guard_scale: 0, subnormal or NaN scales become FLT_MIN.
SINKQ_HD inline float guard_scale(float s) { return s >= FLT_MIN ? s : FLT_MIN; }

// acc + Σ_j c_j·x_j over the 4 bytes of w (8-bit weights stored u = c + 128, so c = u ^ 0x80 as
// int8) and x (int8 activation codes, column order).
SINKQ_HD inline int32_t dot4_w8(uint32_t w, uint32_t x, int32_t acc) {
#if defined(__CUDA_ARCH__)
  return __dp4a(int(w ^ 0x80808080u), int(x), acc);
#else
  for (int j = 0; j < 4; ++j)
    acc += int32_t(int8_t(uint8_t((w >> (8 * j)) & 0xFF) ^ 0x80)) * int32_t(int8_t(uint8_t((x >> (8 * j)) & 0xFF)));
  return acc;
#endif
}

// acc + Σ_j u_j·x_j over the 8 nibbles of w (4-bit step layout: byte j's low nibble is column j,
// its high nibble column 4 + j) against x_lo (columns 0..3) and x_hi (columns 4..7). u in [0, 15]:
// the level is u - z (z = 8 symmetric, the zero point asymmetric), subtracted per group as z·Σx.
SINKQ_HD inline int32_t dot8_w4(uint32_t w, uint32_t x_lo, uint32_t x_hi, int32_t acc) {
#if defined(__CUDA_ARCH__)
  acc = __dp4a(int(w & 0x0F0F0F0Fu), int(x_lo), acc);
  return __dp4a(int((w >> 4) & 0x0F0F0F0Fu), int(x_hi), acc);
#else
  for (int j = 0; j < 4; ++j) {
    const uint32_t b = (w >> (8 * j)) & 0xFF;
    acc += int32_t(b & 0xF) * int32_t(int8_t(uint8_t((x_lo >> (8 * j)) & 0xFF)));
    acc += int32_t(b >> 4) * int32_t(int8_t(uint8_t((x_hi >> (8 * j)) & 0xFF)));
  }
  return acc;
#endif
}

// One thread's share of one step: acc[i] (row 4q + i of the block) += the dot of word w[i] with
// the step's activation words (8-bit: x_lo alone, columns 4s..4s+3; 4-bit: x_lo, x_hi for
// columns 8s..8s+3, 8s+4..8s+7).
SINKQ_HD inline void step_share(int bits, const uint32_t w[4], uint32_t x_lo, uint32_t x_hi, int32_t acc[4]) {
  for (int i = 0; i < 4; ++i) acc[i] = bits == 8 ? dot4_w8(w[i], x_lo, acc[i]) : dot8_w4(w[i], x_lo, x_hi, acc[i]);
}

// The weight-level sum of a row (or group) from its raw sum: 8-bit sums are already Σ c·x;
// 4-bit sums are Σ u·x, and the level is u - z, so Σ (u - z)·x = Σ u·x - z·Σ x (z = 8 symmetric).
SINKQ_HD inline int32_t level_sum(int bits, int32_t raw, int32_t z, int32_t xsum) {
  return bits == 8 ? raw : raw - z * xsum;
}

// Per-row weights: y = (s_x · s_w) · float(Σ) (lowbit/kernels.h "Exactness").
SINKQ_HD inline float out_per_row(int32_t sum, float sx, float sw) { return mul_rn(mul_rn(sx, sw), float(sum)); }
// Per-group weights: f = f + s_w,g · float(Σ_g), left to right over g; y = s_x · f.
SINKQ_HD inline float fold_group(float f, float sg, int32_t sum) { return add_rn(f, mul_rn(sg, float(sum))); }
SINKQ_HD inline float out_grouped(float f, float sx) { return mul_rn(sx, f); }
// + bias (when there is one), one rounding.
SINKQ_HD inline float with_bias(float v, const float* bias, int64_t row) { return bias ? add_rn(v, bias[row]) : v; }

// The tensor-core path (linear_kernels.cu gemm_tc_kernel) multiplies weight *levels* as int8,
// so its integer sums are the level sums directly: 8-bit, c = u − 128 (u ^ 0x80 per byte);
// 4-bit, the 8 nibbles of a step word as u − z (z = 8 symmetric or the zero point; in [−15, 15]),
// columns 0..3 into lo and 4..7 into hi (byte j of each: column j, resp. 4 + j).
SINKQ_HD inline uint32_t levels_w8(uint32_t w) { return w ^ 0x80808080u; }
SINKQ_HD inline void levels_w4(uint32_t w, int32_t z, uint32_t& lo, uint32_t& hi) {
  lo = hi = 0;
  for (int j = 0; j < 4; ++j) {
    const uint32_t b = (w >> (8 * j)) & 0xFF;
    lo |= uint32_t(uint8_t(int8_t(int32_t(b & 0xF) - z))) << (8 * j);
    hi |= uint32_t(uint8_t(int8_t(int32_t(b >> 4) - z))) << (8 * j);
  }
}
// acc + Σ_j a_j·b_j over 4 int8 lanes of each word (both signed): what the tensor cores sum.
SINKQ_HD inline int32_t dot4_i8(uint32_t a, uint32_t b, int32_t acc) {
#if defined(__CUDA_ARCH__)
  return __dp4a(int(a), int(b), acc);
#else
  for (int j = 0; j < 4; ++j)
    acc += int32_t(int8_t(uint8_t((a >> (8 * j)) & 0xFF))) * int32_t(int8_t(uint8_t((b >> (8 * j)) & 0xFF)));
  return acc;
#endif
}
// Tokens a tensor-core thread block takes (4 warps of 16) and columns it stages per round.
inline constexpr int kTcTokens = 64;
inline constexpr int kTcChunk = 64;

// The activation side: columns of a step (4 for 8-bit weights, 8 for 4-bit), and the sums of the
// int8 activation codes over 32-column chunks (a group's Σ x is the sum of its chunks: groups are
// multiples of 32 columns; a per-row 4-bit row sums every chunk).
SINKQ_HD constexpr int step_cols(int bits) { return bits == 4 ? 8 : 4; }
inline constexpr int kSumCols = 32;

}  // namespace sinkq::cuda::math
