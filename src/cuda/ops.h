// sinkq/cuda/ops.h — the forward pass's element-wise operators on a CUDA device (issue 40's
// kernel list beyond the linear and attention): RMSNorm, RoPE from precomputed cos | sin rows,
// SwiGLU, the residual add, the embedding rows and the online Hadamard (QuaRot R3 / R4).
//
// Each is the CPU operator's formula in the CPU's fp32 order (cuda/ops_math.h): RoPE, the add, the
// embedding and the Hadamard bit for bit the CPU's; RMSNorm (its Σ x² in the device's order) and
// SwiGLU (CUDA's expf) within the bounds ops_math.h derives. Every pointer is device memory; each
// call is asynchronous on the default stream (a launch error is thrown at once as sinkq::Error, a
// kernel's at the next synchronising call). Plain C++: the engine includes it without nvcc.
#pragma once

#include <cstdint>
#include <span>

#include "core/mat.h"
#include "cuda/linear.h"

namespace sinkq::cuda {

// y[t, :] = x[t, :] / sqrt(mean(x[t, :]²) + eps) · w  (sinkq::rmsnorm). y may alias x.
void rmsnorm(const float* x, const float* w, float* y, int64_t T, int64_t n, float eps);

// In place on x [T, n_heads, head_dim]: each head's pairs (i, i + head_dim/2) rotated by row t of
// cs [T, head_dim] ([cos | sin], sinkq::rope_cos_sin's rows): sinkq::rope_apply_cs bit for bit.
void rope_apply_cs(const float* cs, int head_dim, float* x, int64_t T, int n_heads);

// g[i] = silu(g[i]) · u[i] for i < n (SwiGLU, sinkq::silu_mul).
void silu_mul(float* g, const float* u, int64_t n);

// x[i] += y[i] for i < n (the residual stream).
void add(float* x, const float* y, int64_t n);

// An embedding table (F32, F16 or BF16 rows) in device memory, gathered into fp32 rows.
class DeviceTable {
 public:
  // Uploads table's rows; throws sinkq::Error for another dtype (naming the table).
  explicit DeviceTable(const Mat& table);
  int64_t rows() const { return rows_; }
  int64_t cols() const { return cols_; }
  size_t bytes() const { return data_.bytes(); }
  // out [ids.size(), cols] (device) = the rows of ids (host), widened exactly (sinkq::embed_rows).
  // Throws sinkq::Error, as the CPU does, for an id outside [0, rows) before anything is written.
  // Synchronous (the ids are copied to the device through `scratch`, grown as needed).
  void gather(std::span<const int32_t> ids, float* out, DeviceBuffer& scratch) const;

 private:
  DeviceBuffer data_;
  DType dtype_ = DType::F32;
  int64_t rows_ = 0, cols_ = 0;
  std::string name_;
};

// The online Hadamard transform of kernels/hadamard_kernels.h on the device: each row of
// x [rows, pow2·m] becomes ((H_pow2 · ((x ⊙ pre) as X[pow2, m]) · B) · scale) ⊙ post, in
// ref::hadamard_rows's order (bit for bit). One thread block a row, the row in shared memory.
class DeviceHadamard {
 public:
  // base [m, m] of ±1 (ignored for m = 1), pre / post null or [pow2·m] of ±1 (host memory). Throws
  // sinkq::Error for a bad shape (as hadamard_rows does) or a row too large for the device's
  // shared memory (pow2·m floats per block).
  DeviceHadamard(int64_t pow2, int m, const float* base, float scale, const float* pre = nullptr,
                 const float* post = nullptr);
  int64_t size() const { return pow2_ * m_; }
  // In place on x [rows, size()] (device).
  void apply(float* x, int64_t rows) const;

 private:
  int64_t pow2_ = 1;
  int m_ = 1;
  float scale_ = 1.0f;
  DeviceBuffer base_, pre_, post_;
};

}  // namespace sinkq::cuda
