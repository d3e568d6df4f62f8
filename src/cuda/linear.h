// sinkq/cuda/linear.h — the packed linear layer on a CUDA device (issue 40's first room): the
// weights of lowbit::KernelWeights held in device memory as they are, activations quantized on
// the device (A8: dynamic per token, or static per tensor), and the W8 / W4 decode GEMV, each
// result bit for bit what the CPU gives (lowbit::quantize_dynamic / quantize_static + lowbit::gemm;
// the arithmetic: cuda/linear_math.h).
//
// Plain C++ (no CUDA types): the engine and the tests include it without nvcc. Built only with
// -DSINKQ_CUDA=ON (src/cuda/CMakeLists.txt); every CUDA error becomes a sinkq::Error naming the
// call. Prefill (T >= kGemmMinTokens) runs on the int8 tensor cores, the same bits; A4 activations
// are widened to int8 as on the CPU; CrossQuant's folded columns (DeviceCrossFold). Not yet: the
// rest of the model (docs/cuda.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "cuda/linear_kernels.h"
#include "lowbit/kernels.h"
#include "quant/crossquant.h"

namespace sinkq::cuda {

// Whether a CUDA device can be used (a driver and at least one device); if not, why.
bool device_available(std::string* why = nullptr);
// "NVIDIA H200, sm_90, 132 SMs, 141 GB" of the current device.
std::string device_description();

// Device memory, owned (cudaMalloc / cudaFree). Moves only.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& o) noexcept : p_(o.p_), n_(o.n_) { o.p_ = nullptr, o.n_ = 0; }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* get() const { return p_; }
  template <class T>
  T* as() const { return static_cast<T*>(p_); }
  size_t bytes() const { return n_; }
  void upload(const void* src, size_t bytes, size_t offset = 0);
  void download(void* dst, size_t bytes, size_t offset = 0) const;
  void fill_zero();

 private:
  void* p_ = nullptr;
  size_t n_ = 0;
};

// CrossQuant's static columns folded into the weights (quant/crossquant.h CrossFold): the fold
// factors b on the device. The input of a linear then is z = fl32(x / b), quantized per token at
// quant::cross_token_scale(bits, α, max|x_i|, max|z_i|) — formed on the host from the two maxima
// the device reduces, with the CPU's own function, so the codes and scales are the CPU's bits.
struct DeviceCrossFold {
  explicit DeviceCrossFold(const quant::CrossFold& f);
  int bits = 8;
  float alpha = 0.15f;
  int64_t cols = 0;
  DeviceBuffer b;
};

// How the linear quantizes its input: A8 or A4 per token (dynamic, clip) or per tensor (static
// scale). A4 codes are held one per byte (values −8..7), so the same GEMV / GEMM multiply them:
// the CPU widens A4 to int8 the same way, so the sums and outputs are its bits. cross (per-token
// formats only, its bits theirs): CrossQuant's folded rule instead of the dynamic one.
struct ActQuant {
  lowbit::PackedFormat format = lowbit::PackedFormat::A8_PerToken;
  float clip = 1.0f;          // A8_PerToken / A4_PerToken
  float static_scale = 0.0f;  // A8_PerTensor / A4_PerTensor: the calibrated scale (a positive normal fp32)
  const DeviceCrossFold* cross = nullptr;
};

// The activation codes of one call on the device (reused between calls: grows, never shrinks).
struct DeviceActivations {
  DeviceBuffer codes, scales, sums, bad;
  DeviceBuffer z, maxima;  // CrossQuant: x / b [T, cols], and (max |x_i|, max |z_i|) per token
  int64_t T = 0, cols = 0, ldc = 0, nsum = 0;
};

class DeviceLinear {
 public:
  // Uploads w (throws sinkq::Error for a format the device kernels do not take: none today
  // beyond lowbit's weight formats, or a group size other than 32..256 columns).
  explicit DeviceLinear(const lowbit::KernelWeights& w);
  int64_t rows() const { return rows_; }
  int64_t cols() const { return cols_; }
  lowbit::PackedFormat format() const { return format_; }
  size_t bytes() const { return codes_.bytes() + scales_.bytes() + zeros_.bytes(); }

  // y[T, rows] = Q(x)·ŵᵀ (+ bias[rows]); x [T, cols], bias and y are device pointers. Throws
  // sinkq::Error naming the token and feature of a non-finite input under dynamic quantization
  // (as lowbit::quantize_dynamic does), or for a bad ActQuant. Synchronous.
  // unroll: the GEMV's passes per round (1 or 4: loads in flight per thread; the same bits).
  void forward(const float* x, int64_t T, const ActQuant& q, const float* bias, float* y,
               DeviceActivations& scratch, int unroll = 4) const;
  // The GEMV alone over activations already quantized into `act` (by quantize()), asynchronous on
  // the default stream: what a benchmark times.
  void gemv(const DeviceActivations& act, const float* bias, float* y, int unroll = 4) const;
  // The same product on the int8 tensor cores (the same bits; forward() takes it from
  // kGemmMinTokens tokens on), asynchronous likewise.
  void gemm(const DeviceActivations& act, const float* bias, float* y) const;
  static constexpr int64_t kGemmMinTokens = 16;

 private:
  detail::GemvArgs args(const DeviceActivations& act, const float* bias, float* y, int unroll) const;
  lowbit::PackedFormat format_;
  int bits_ = 8;
  bool grouped_ = false, asymmetric_ = false;
  int64_t rows_ = 0, cols_ = 0, steps_ = 0, groups_ = 1;
  DeviceBuffer codes_, scales_, zeros_;
};

// Quantizes x [T, cols] (device) into act per q: int8 codes (A4: −8..7) padded to a multiple of
// 64 columns, per-token scales, 32-column code sums. Synchronous (reads the non-finite flag back).
void quantize(const float* x, int64_t T, int64_t cols, const ActQuant& q, DeviceActivations& act);

}  // namespace sinkq::cuda
