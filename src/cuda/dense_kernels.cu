// sinkq/cuda/dense_kernels.cu — y = x · Wᵀ (+ bias) over an F32 / F16 / BF16 weight matrix
// (cuda/dense.h). One warp a weight row, eight warps a block; lane l takes columns 8l..8l+7,
// 8l+256.., (one 16-byte load of eight 16-bit weights, or two of four fp32), widened exactly
// (ops_math.h) and multiplied into up to kDenseTokens token sums held in registers, so each weight
// row is read once per kDenseTokens tokens; a butterfly over the lanes ends each sum.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "cuda/dense_kernels.h"
#include "cuda/ops_math.h"

namespace sinkq::cuda::detail {

namespace {

constexpr int kWarps = 8, kThreads = 32 * kWarps;
constexpr unsigned kFull = 0xffffffffu;

// Columns [k, k + 8) of a row as fp32 (k + 8 <= cols, the row 16-byte aligned for 16-bit weights
// and k a multiple of 8; fp32 rows read as two 16-byte halves when cols % 4 == 0).
template <int EB, bool BF16>
__device__ inline void load8(const void* row, int64_t k, int64_t cols, float w[8]) {
  if constexpr (EB == 2) {
    const uint4 v = *reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(row) + k);
    const uint32_t words[4] = {v.x, v.y, v.z, v.w};
    for (int i = 0; i < 4; ++i) {
      const uint16_t lo = uint16_t(words[i] & 0xFFFFu), hi = uint16_t(words[i] >> 16);
      w[2 * i] = BF16 ? math::widen_bf16(lo) : math::widen_f16(lo);
      w[2 * i + 1] = BF16 ? math::widen_bf16(hi) : math::widen_f16(hi);
    }
  } else {
    const float* r = static_cast<const float*>(row) + k;
    for (int i = 0; i < 8; ++i) w[i] = r[i];
  }
}

template <int EB, bool BF16>
__device__ inline float load1(const void* row, int64_t k) {
  if constexpr (EB == 2) {
    const uint16_t h = static_cast<const uint16_t*>(row)[k];
    return BF16 ? math::widen_bf16(h) : math::widen_f16(h);
  } else {
    return static_cast<const float*>(row)[k];
  }
}

template <int EB, bool BF16>
__global__ void __launch_bounds__(kThreads) dense_kernel(DenseArgs a) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t r = int64_t(blockIdx.x) * kWarps + warp;
  if (r >= a.rows) return;  // a whole warp: no later warp-wide call in this warp
  const void* row = static_cast<const char*>(a.w) + r * a.cols * EB;
  // 16-byte loads need every row aligned: cols % 8 == 0 (16-bit) / % 4 == 0 (fp32).
  const bool vec = EB == 2 ? a.cols % 8 == 0 : a.cols % 4 == 0;
  const int64_t kvec = vec ? a.cols / 8 * 8 : 0;
  for (int64_t t0 = int64_t(blockIdx.y) * kDenseTokens; t0 < a.T; t0 += int64_t(gridDim.y) * kDenseTokens) {
    const int nt = int(a.T - t0 < kDenseTokens ? a.T - t0 : kDenseTokens);
    float acc[kDenseTokens];
    for (int t = 0; t < kDenseTokens; ++t) acc[t] = 0.0f;
    for (int64_t k = int64_t(lane) * 8; k < kvec; k += 256) {
      float w[8];
      load8<EB, BF16>(row, k, a.cols, w);
#pragma unroll
      for (int t = 0; t < kDenseTokens; ++t) {
        if (t >= nt) break;
        const float* x = a.x + (t0 + t) * a.cols + k;
        float s = acc[t];
        for (int i = 0; i < 8; ++i) s = __fmaf_rn(x[i], w[i], s);
        acc[t] = s;
      }
    }
    for (int64_t k = kvec + lane; k < a.cols; k += 32) {  // the columns the 8-wide loop left
      const float w = load1<EB, BF16>(row, k);
      for (int t = 0; t < nt; ++t) acc[t] = __fmaf_rn(a.x[(t0 + t) * a.cols + k], w, acc[t]);
    }
    for (int t = 0; t < kDenseTokens; ++t) {
      float s = acc[t];
      for (int off = 16; off > 0; off >>= 1) s = __fadd_rn(s, __shfl_xor_sync(kFull, s, off));
      if (lane == 0 && t < nt) a.y[(t0 + t) * a.rows + r] = a.bias ? __fadd_rn(s, a.bias[r]) : s;
    }
  }
}

}  // namespace

void launch_dense(const DenseArgs& a, void* stream) {
  if (a.T <= 0 || a.rows <= 0) return;
  const dim3 grid(unsigned((a.rows + kWarps - 1) / kWarps),
                  unsigned(std::min<int64_t>((a.T + kDenseTokens - 1) / kDenseTokens, 65535)));
  cudaStream_t st = static_cast<cudaStream_t>(stream);
  if (a.elem_bytes == 4) dense_kernel<4, false><<<grid, kThreads, 0, st>>>(a);
  else if (a.bf16) dense_kernel<2, true><<<grid, kThreads, 0, st>>>(a);
  else dense_kernel<2, false><<<grid, kThreads, 0, st>>>(a);
}

}  // namespace sinkq::cuda::detail
