// sinkq/cuda/ops_kernels.h — the launch interface of the device's element-wise operators
// (cuda/ops.h): plain structs of device pointers, kernels in ops_kernels.cu (nvcc only). Each
// launcher enqueues on `stream` (nullptr: the default stream) and returns; the caller checks.
#pragma once

#include <cstdint>

namespace sinkq::cuda::detail {

void launch_rmsnorm(const float* x, const float* w, float* y, int64_t T, int64_t n, float eps, void* stream);
void launch_rope_cs(const float* cs, int head_dim, float* x, int64_t T, int n_heads, void* stream);
void launch_silu_mul(float* g, const float* u, int64_t n, void* stream);
void launch_add(float* x, const float* y, int64_t n, void* stream);

// Rows ids[0..n) of a table of `cols` elements each (elem_bytes 4: fp32, 2: f16 or bf16) into
// out [n, cols] fp32. The ids are already checked against the table.
void launch_embed(const void* table, int elem_bytes, bool bf16, int64_t cols, const int32_t* ids, int64_t n,
                  float* out, void* stream);

// The online Hadamard over x [rows, pow2·m] (cuda/ops.h DeviceHadamard); smem_bytes = pow2·m·4.
struct HadamardArgs {
  float* x = nullptr;
  int64_t rows = 0, pow2 = 1;
  int m = 1;
  const float* base = nullptr;  // [m, m]
  float scale = 1.0f;
  const float* pre = nullptr;   // [pow2·m] or null
  const float* post = nullptr;
};
// The largest dynamic shared memory a block may use on this device (the opt-in limit), bytes;
// the kernels that need more than 48 KB opt in at launch.
int max_block_smem();
void launch_hadamard(const HadamardArgs& a, void* stream);

}  // namespace sinkq::cuda::detail
