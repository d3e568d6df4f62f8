// sinkq/cuda/dense_kernels.h — the launch interface of cuda/dense.h's kernel (dense_kernels.cu).
#pragma once

#include <cstdint>

namespace sinkq::cuda::detail {

// y[T, rows] = x[T, cols] · Wᵀ (+ bias): w [rows, cols] of elem_bytes 4 (fp32) or 2 (f16, or bf16
// when bf16); one warp a row, up to kDenseTokens tokens a pass.
inline constexpr int kDenseTokens = 8;
struct DenseArgs {
  const void* w = nullptr;
  int elem_bytes = 4;
  bool bf16 = false;
  int64_t rows = 0, cols = 0, T = 0;
  const float* x = nullptr;
  const float* bias = nullptr;
  float* y = nullptr;
};
void launch_dense(const DenseArgs& a, void* stream);

}  // namespace sinkq::cuda::detail
