// sinkq/cuda/linear_kernels.h — the launch interface of the device kernels of cuda/linear.h (plain
// structs of device pointers; the kernels are linear_kernels.cu, compiled by nvcc only, and the
// host code that calls them is plain C++).
#pragma once

#include <cstdint>

namespace sinkq::cuda::detail {

// Activation quantization, one token per thread block: x [T, cols] fp32 -> codes [T, ldc] int8
// (columns cols..ldc-1 zero; `bits` 8, or 4 with codes −8..7 one per byte), scales [T] (dynamic:
// s_t = guard(clip·absmax_t / (2^(bits−1) − 1)); static: the one given scale for every token),
// sums [T, ceil(cols / 32)] of the codes per 32-column chunk.
// Dynamic: a token with a non-finite value sets *bad_token = min(*bad_token, t) and writes nothing
// else. Static: as quant::quantize_to_int (±inf clamp, NaN the lowest code).
struct QuantArgs {
  const float* x = nullptr;
  int64_t T = 0, cols = 0, ldc = 0;
  bool dynamic = true;
  int bits = 8;
  const float* row_scales = nullptr;  // given per-token scales (CrossQuant): codes at them, as static
  float clip = 1.0f;          // dynamic
  float static_scale = 0.0f;  // static
  int8_t* codes = nullptr;
  float* scales = nullptr;
  int32_t* sums = nullptr;
  int64_t* bad_token = nullptr;
};
void launch_quantize(const QuantArgs& a, void* stream);

// CrossQuant's fold, one token per thread block: z [T, cols] = fl32(x / b), maxima [T][2] =
// (max_j |x_tj|, max_j |z_tj|) (exact: maxima of the same values in any order). A token with a
// non-finite value sets *bad_token = min(*bad_token, t).
struct CrossArgs {
  const float* x = nullptr;
  const float* b = nullptr;
  int64_t T = 0, cols = 0;
  float* z = nullptr;
  float* maxima = nullptr;
  int64_t* bad_token = nullptr;
};
void launch_cross_fold(const CrossArgs& a, void* stream);

// y[T, rows] = x̂ · ŵᵀ (+ bias) over lowbit::KernelWeights' arrays as uploaded: one thread block
// per (16-row block, token). unroll: passes of 32 steps whose loads a thread issues together (1 or
// 4; the same bits either way).
inline constexpr int kGemvUnrolls[] = {1, 4};
struct GemvArgs {
  int unroll = 4;
  int bits = 8;
  bool grouped = false, asymmetric = false;
  int64_t rows = 0, cols = 0, steps = 0, groups = 1;
  const uint8_t* codes = nullptr;   // [blocks][steps][64]
  const float* wscales = nullptr;   // [blocks][groups][16]
  const int32_t* wzeros = nullptr;  // [blocks][groups][16], asymmetric only
  const int8_t* xcodes = nullptr;   // [T, ldx], zero past cols
  int64_t T = 0, ldx = 0;
  const float* xscales = nullptr;   // [T]
  const int32_t* xsums = nullptr;   // [T, nsum]
  int64_t nsum = 0;
  const float* bias = nullptr;      // [rows] or nullptr
  float* y = nullptr;               // [T, rows]
};
void launch_gemv(const GemvArgs& a, void* stream);
// The same product on the int8 tensor cores (prefill: T tokens): one thread block per (16-row
// block, 64 tokens); weights widened to int8 levels in shared memory (linear_math.h levels_w8 /
// levels_w4), the integer sums exact, folded as the GEMV folds them: the same bits. `unroll` unused.
void launch_gemm_tc(const GemvArgs& a, void* stream);

}  // namespace sinkq::cuda::detail
