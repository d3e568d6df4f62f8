// sinkq/cuda/dense.cc — the host side of cuda/dense.h.
#include "cuda/dense.h"

#include <cuda_runtime_api.h>

#include "core/error.h"
#include "cuda/check.h"
#include "cuda/dense_kernels.h"

namespace sinkq::cuda {

DeviceMat::DeviceMat(const Mat& w)
    : dtype_(w.dtype), rows_(w.rows), cols_(w.cols), name_(w.name.empty() ? std::string("a weight matrix") : w.name) {
  SINKQ_CHECK(w.dtype == DType::F32 || w.dtype == DType::F16 || w.dtype == DType::BF16,
              "cuda dense linear: {} is {}; the device takes F32, F16 or BF16 weights", name_, dtype_name(w.dtype));
  SINKQ_CHECK(w.data && rows_ > 0 && cols_ > 0, "cuda dense linear: {} is empty ([{}, {}])", name_, rows_, cols_);
  data_ = DeviceBuffer(size_t(rows_) * size_t(cols_) * dtype_size(dtype_));
  data_.upload(w.data, data_.bytes());
}

void DeviceMat::matmul(const float* x, int64_t T, const float* bias, float* y) const {
  SINKQ_CHECK(T >= 0 && (T == 0 || (x && y)), "cuda dense linear {}: {} tokens, a null device pointer", name_, T);
  SINKQ_CHECK(x != y || T == 0, "cuda dense linear {}: y aliases x", name_);
  detail::DenseArgs a;
  a.w = data_.get(), a.elem_bytes = int(dtype_size(dtype_)), a.bf16 = dtype_ == DType::BF16;
  a.rows = rows_, a.cols = cols_, a.T = T, a.x = x, a.bias = bias, a.y = y;
  detail::launch_dense(a, nullptr);
  detail::check(cudaGetLastError(), "dense linear launch");
}

}  // namespace sinkq::cuda
