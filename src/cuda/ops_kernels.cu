// sinkq/cuda/ops_kernels.cu — the device's element-wise operators (cuda/ops.h), each in the CPU
// operator's fp32 order (cuda/ops_math.h); built with -fmad=false -prec-div=true -prec-sqrt=true
// -ftz=false, so no product is contracted into a multiply-add and no denormal flushed.
// Every kernel loops over its rows with the grid's stride, so any row count fits one launch.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "cuda/ops_kernels.h"
#include "cuda/ops_math.h"

namespace sinkq::cuda::detail {

namespace {

using math::add_rn;
using math::kRmsThreads;
using math::mul_rn;

constexpr int kThreads = 256;
constexpr int64_t kMaxGrid = 65535;

unsigned grid_for(int64_t rows) { return unsigned(std::max<int64_t>(1, std::min(rows, kMaxGrid))); }

// One block a row: the row's Σ x² in the order ops_math.h states (thread-strided shares, then a
// binary tree over the kRmsThreads partial sums), then y = w · (x · r).
__global__ void __launch_bounds__(kRmsThreads) rmsnorm_kernel(const float* x, const float* w, float* y, int64_t T,
                                                                int64_t n, float eps) {
  __shared__ float part[kRmsThreads];
  const int tid = int(threadIdx.x);
  for (int64_t t = blockIdx.x; t < T; t += gridDim.x) {
    const float* xr = x + t * n;
    float* yr = y + t * n;
    float acc = 0.0f;
    for (int64_t i = tid; i < n; i += kRmsThreads) acc = add_rn(acc, mul_rn(xr[i], xr[i]));
    part[tid] = acc;
    __syncthreads();
    for (int s = kRmsThreads / 2; s > 0; s >>= 1) {
      if (tid < s) part[tid] = add_rn(part[tid], part[tid + s]);
      __syncthreads();
    }
    const float r = math::rms_inv(part[0], n, eps);
    for (int64_t i = tid; i < n; i += kRmsThreads) yr[i] = math::rms_apply(xr[i], r, w[i]);
    __syncthreads();  // part[0] is read by every thread before the next row writes part
  }
}

// One block per (token, head): the head's pairs rotated by the token's cos | sin row.
__global__ void __launch_bounds__(kThreads) rope_kernel(const float* cs, int D, float* x, int64_t T, int H) {
  const int half = D / 2;
  for (int64_t th = blockIdx.x; th < T * H; th += gridDim.x) {
    float* v = x + th * D;
    const float* c = cs + (th / H) * D;
    for (int i = int(threadIdx.x); i < half; i += kThreads) {
      float a = v[i], b = v[i + half];
      math::rope_pair(a, b, c[i], c[half + i]);
      v[i] = a, v[i + half] = b;
    }
  }
}

__global__ void __launch_bounds__(kThreads) silu_mul_kernel(float* g, const float* u, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * kThreads + threadIdx.x; i < n; i += int64_t(gridDim.x) * kThreads)
    g[i] = math::silu_mul_with(g[i], u[i], expf(-g[i]));
}

__global__ void __launch_bounds__(kThreads) add_kernel(float* x, const float* y, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * kThreads + threadIdx.x; i < n; i += int64_t(gridDim.x) * kThreads)
    x[i] = add_rn(x[i], y[i]);
}

// One block an output row.
__global__ void __launch_bounds__(kThreads) embed_kernel(const void* table, int elem_bytes, bool bf16, int64_t cols,
                                                         const int32_t* ids, int64_t n, float* out) {
  for (int64_t r = blockIdx.x; r < n; r += gridDim.x) {
    const int64_t base = int64_t(ids[r]) * cols;
    float* o = out + r * cols;
    for (int64_t c = threadIdx.x; c < cols; c += kThreads) {
      if (elem_bytes == 4) {
        o[c] = static_cast<const float*>(table)[base + c];
      } else {
        const uint16_t h = static_cast<const uint16_t*>(table)[base + c];
        o[c] = bf16 ? math::widen_bf16(h) : math::widen_f16(h);
      }
    }
  }
}

// One block a row, the row in shared memory. ref::hadamard_rows's order: x ⊙ pre; Y_a[c] = 0 +
// Σ_r X_a[r]·B[r][c] in r order (each output summed by one thread); the butterflies (u, w) ←
// (u + w, u − w) of stride h = 1, 2, …, pow2/2, a barrier between stages; · scale, ⊙ post.
__global__ void __launch_bounds__(kThreads) hadamard_kernel(HadamardArgs a) {
  extern __shared__ float buf[];
  const int m = a.m;
  const int64_t n = a.pow2 * m;
  const int tid = int(threadIdx.x);
  for (int64_t row = blockIdx.x; row < a.rows; row += gridDim.x) {
    float* xr = a.x + row * n;
    for (int64_t k = tid; k < n; k += kThreads)
      buf[k] = m == 1 ? (a.pre ? mul_rn(xr[k], a.pre[k]) : xr[k]) : math::hadamard_mstep(xr, a.pre, a.base, m, k);
    __syncthreads();
    for (int64_t h = 1; h < a.pow2; h *= 2) {
      for (int64_t p = tid; p < n / 2; p += kThreads) math::butterfly(buf, p, h * m);
      __syncthreads();
    }
    for (int64_t k = tid; k < n; k += kThreads) xr[k] = math::hadamard_out(buf[k], a.scale, a.post, k);
    __syncthreads();  // buf is rewritten by the next row
  }
}

cudaStream_t st(void* s) { return static_cast<cudaStream_t>(s); }

}  // namespace

void launch_rmsnorm(const float* x, const float* w, float* y, int64_t T, int64_t n, float eps, void* stream) {
  if (T > 0) rmsnorm_kernel<<<grid_for(T), kRmsThreads, 0, st(stream)>>>(x, w, y, T, n, eps);
}

void launch_rope_cs(const float* cs, int head_dim, float* x, int64_t T, int n_heads, void* stream) {
  if (T > 0 && n_heads > 0) rope_kernel<<<grid_for(T * n_heads), kThreads, 0, st(stream)>>>(cs, head_dim, x, T, n_heads);
}

void launch_silu_mul(float* g, const float* u, int64_t n, void* stream) {
  if (n > 0) silu_mul_kernel<<<grid_for((n + kThreads - 1) / kThreads), kThreads, 0, st(stream)>>>(g, u, n);
}

void launch_add(float* x, const float* y, int64_t n, void* stream) {
  if (n > 0) add_kernel<<<grid_for((n + kThreads - 1) / kThreads), kThreads, 0, st(stream)>>>(x, y, n);
}

void launch_embed(const void* table, int elem_bytes, bool bf16, int64_t cols, const int32_t* ids, int64_t n,
                  float* out, void* stream) {
  if (n > 0) embed_kernel<<<grid_for(n), kThreads, 0, st(stream)>>>(table, elem_bytes, bf16, cols, ids, n, out);
}

int max_block_smem() {
  int dev = 0, v = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess) {
    cudaGetLastError();
    return 48 * 1024;  // every device since sm_20 gives a block this much without opting in
  }
  return v;
}

void launch_hadamard(const HadamardArgs& a, void* stream) {
  if (a.rows <= 0) return;
  const size_t smem = size_t(a.pow2 * a.m) * sizeof(float);
  if (smem > 48 * 1024 &&  // opt in; on failure skip the launch: the caller's cudaGetLastError() says why
      cudaFuncSetAttribute(hadamard_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)) != cudaSuccess)
    return;
  hadamard_kernel<<<grid_for(a.rows), kThreads, smem, st(stream)>>>(a);
}

}  // namespace sinkq::cuda::detail
