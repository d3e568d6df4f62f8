// sinkq/cuda/ops.cc — the host side of cuda/ops.h: argument checks, uploads, launches.
#include "cuda/ops.h"

#include <cuda_runtime_api.h>

#include "core/error.h"
#include "cuda/check.h"
#include "cuda/ops_kernels.h"
#include "kernels/hadamard_kernels.h"

namespace sinkq::cuda {

using detail::check;

namespace {
void launched(const char* what) { check(cudaGetLastError(), what); }
}  // namespace

void rmsnorm(const float* x, const float* w, float* y, int64_t T, int64_t n, float eps) {
  SINKQ_CHECK(T >= 0 && n > 0, "cuda rmsnorm: shape [{}, {}]", T, n);
  SINKQ_CHECK(T == 0 || (x && w && y), "cuda rmsnorm: a null device pointer");
  detail::launch_rmsnorm(x, w, y, T, n, eps, nullptr);
  launched("rmsnorm launch");
}

void rope_apply_cs(const float* cs, int head_dim, float* x, int64_t T, int n_heads) {
  SINKQ_CHECK(head_dim > 0 && head_dim % 2 == 0 && T >= 0 && n_heads >= 0,
              "cuda rope: head_dim {} (must be even and positive), T {}, heads {}", head_dim, T, n_heads);
  SINKQ_CHECK(T == 0 || n_heads == 0 || (cs && x), "cuda rope: a null device pointer");
  detail::launch_rope_cs(cs, head_dim, x, T, n_heads, nullptr);
  launched("rope launch");
}

void silu_mul(float* g, const float* u, int64_t n) {
  SINKQ_CHECK(n >= 0 && (n == 0 || (g && u)), "cuda silu_mul: {} elements, a null device pointer", n);
  detail::launch_silu_mul(g, u, n, nullptr);
  launched("silu_mul launch");
}

void add(float* x, const float* y, int64_t n) {
  SINKQ_CHECK(n >= 0 && (n == 0 || (x && y)), "cuda add: {} elements, a null device pointer", n);
  detail::launch_add(x, y, n, nullptr);
  launched("add launch");
}

// ---- DeviceTable ----------------------------------------------------------------------------

DeviceTable::DeviceTable(const Mat& table)
    : dtype_(table.dtype), rows_(table.rows), cols_(table.cols),
      name_(table.name.empty() ? std::string("the embedding table") : table.name) {
  SINKQ_CHECK(table.dtype == DType::F32 || table.dtype == DType::F16 || table.dtype == DType::BF16,
              "cuda embedding: {} is {}; the device takes F32, F16 or BF16 rows", name_, dtype_name(table.dtype));
  SINKQ_CHECK(table.data && rows_ > 0 && cols_ > 0, "cuda embedding: {} is empty ([{}, {}])", name_, rows_, cols_);
  data_ = DeviceBuffer(size_t(rows_) * size_t(cols_) * dtype_size(dtype_));
  data_.upload(table.data, data_.bytes());
}

void DeviceTable::gather(std::span<const int32_t> ids, float* out, DeviceBuffer& scratch) const {
  for (size_t i = 0; i < ids.size(); ++i)  // the CPU's message (sinkq::embed_rows)
    SINKQ_CHECK(ids[i] >= 0 && ids[i] < rows_, "token id {} (position {}) is outside the vocabulary [0, {}) of {}",
                ids[i], i, rows_, name_);
  if (ids.empty()) return;
  SINKQ_CHECK(out != nullptr, "cuda embedding: a null output pointer");
  if (scratch.bytes() < ids.size_bytes()) scratch = DeviceBuffer(ids.size_bytes());
  scratch.upload(ids.data(), ids.size_bytes());
  detail::launch_embed(data_.get(), int(dtype_size(dtype_)), dtype_ == DType::BF16, cols_, scratch.as<int32_t>(),
                       int64_t(ids.size()), out, nullptr);
  launched("embedding launch");
  check(cudaDeviceSynchronize(), "embedding");
}

// ---- DeviceHadamard -------------------------------------------------------------------------

DeviceHadamard::DeviceHadamard(int64_t pow2, int m, const float* base, float scale, const float* pre,
                               const float* post)
    : pow2_(pow2), m_(m), scale_(scale) {
  SINKQ_CHECK(pow2 >= 1 && (pow2 & (pow2 - 1)) == 0, "cuda hadamard: pow2 = {} is not a power of two", pow2);
  SINKQ_CHECK(m >= 1 && m <= kHadamardMaxBase, "cuda hadamard: base size m = {} is outside [1, {}]", m,
              kHadamardMaxBase);
  SINKQ_CHECK(m == 1 || base != nullptr, "cuda hadamard: m = {} needs a base matrix", m);
  const int64_t n = pow2 * m;
  const int64_t limit = detail::max_block_smem();
  SINKQ_CHECK(n <= limit / int64_t(sizeof(float)),
              "cuda hadamard: a row of {} floats needs {} bytes of shared memory; this device gives a block {}", n,
              n * int64_t(sizeof(float)), limit);
  const auto put = [](DeviceBuffer& b, const float* src, int64_t count) {
    if (!src) return;
    b = DeviceBuffer(size_t(count) * sizeof(float));
    b.upload(src, b.bytes());
  };
  if (m > 1) put(base_, base, int64_t(m) * m);
  put(pre_, pre, n);
  put(post_, post, n);
}

void DeviceHadamard::apply(float* x, int64_t rows) const {
  SINKQ_CHECK(rows >= 0 && (rows == 0 || x), "cuda hadamard: {} rows, a null device pointer", rows);
  detail::HadamardArgs a;
  a.x = x, a.rows = rows, a.pow2 = pow2_, a.m = m_, a.scale = scale_;
  a.base = base_.as<float>(), a.pre = pre_.as<float>(), a.post = post_.as<float>();
  detail::launch_hadamard(a, nullptr);
  launched("hadamard launch");
}

}  // namespace sinkq::cuda
