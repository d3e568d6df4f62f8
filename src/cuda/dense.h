// sinkq/cuda/dense.h — the full-precision linear on a CUDA device: an F32 / F16 / BF16 weight
// matrix [rows, cols] (HF nn.Linear layout, as sinkq::Mat holds it) in device memory and
// y = x · Wᵀ (+ bias) in fp32 (the fp model's layers and an f16 / bf16 head: issue 40's baseline
// on the same engine, beside the packed low-bit linears of cuda/linear.h).
//
// Not bit for bit the CPU's sinkq::matmul (whose summation order is its ISA's): each output is a
// sum of K products accumulated in fp32 with one rounding per multiply-add, in the device's order
// (8 consecutive columns per lane of a warp, then a butterfly over the lanes), so within
// γ_{K+1}·Σ|x_k·w_k| of the exact value (+ one rounding for the bias); the device test holds it to
// that bound against the double reference sinkq::ref::matmul.
#pragma once

#include <cstdint>
#include <string>

#include "core/mat.h"
#include "cuda/linear.h"

namespace sinkq::cuda {

class DeviceMat {
 public:
  // Uploads w's rows; throws sinkq::Error for another dtype or an empty matrix (naming it).
  explicit DeviceMat(const Mat& w);
  int64_t rows() const { return rows_; }
  int64_t cols() const { return cols_; }
  DType dtype() const { return dtype_; }
  size_t bytes() const { return data_.bytes(); }
  // y [T, rows] = x [T, cols] · Wᵀ (+ bias [rows]); device pointers, asynchronous on the default
  // stream (a launch error is thrown at once). y may not alias x.
  void matmul(const float* x, int64_t T, const float* bias, float* y) const;

 private:
  DeviceBuffer data_;
  DType dtype_ = DType::F32;
  int64_t rows_ = 0, cols_ = 0;
  std::string name_;
};

}  // namespace sinkq::cuda
