// sinkq/cuda/linear.cc — the host side of cuda/linear.h: device memory, checks, launches.
#include "cuda/linear.h"

#include <cuda_runtime_api.h>

#include <cfloat>
#include <cmath>
#include <limits>
#include <vector>

#include "core/error.h"
#include "cuda/check.h"
#include "cuda/linear_kernels.h"
#include "cuda/linear_math.h"

namespace sinkq::cuda {

void detail::check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) fail("cuda: {} failed: {} ({})", what, cudaGetErrorString(e), cudaGetErrorName(e));
}

namespace {

using detail::check;

// After a launch: the launch error, then (synchronous callers) the kernel's.
void check_launch(const char* what) { check(cudaGetLastError(), what); }

}  // namespace

bool device_available(std::string* why) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    if (why) *why = e != cudaSuccess ? std::string(cudaGetErrorString(e)) : std::string("no CUDA device");
    cudaGetLastError();  // reset the error state for later calls
    return false;
  }
  return true;
}

std::string device_description() {
  int dev = 0;
  check(cudaGetDevice(&dev), "cudaGetDevice");
  cudaDeviceProp p{};
  check(cudaGetDeviceProperties(&p, dev), "cudaGetDeviceProperties");
  return std::string(p.name) + ", sm_" + std::to_string(p.major) + std::to_string(p.minor) + ", " +
         std::to_string(p.multiProcessorCount) + " SMs, " + std::to_string(p.totalGlobalMem >> 30) + " GiB, L2 " +
         std::to_string(p.l2CacheSize >> 20) + " MiB";
}

// ---- DeviceBuffer -------------------------------------------------------------------------

DeviceBuffer::DeviceBuffer(size_t bytes) : n_(bytes) {
  if (bytes > 0) check(cudaMalloc(&p_, bytes), "cudaMalloc");
}

DeviceBuffer::~DeviceBuffer() {
  if (p_) cudaFree(p_);
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    if (p_) cudaFree(p_);
    p_ = o.p_, n_ = o.n_;
    o.p_ = nullptr, o.n_ = 0;
  }
  return *this;
}

void DeviceBuffer::upload(const void* src, size_t bytes, size_t offset) {
  SINKQ_CHECK(offset + bytes <= n_, "cuda: upload of {} bytes at {} into a buffer of {}", bytes, offset, n_);
  if (bytes) check(cudaMemcpy(static_cast<char*>(p_) + offset, src, bytes, cudaMemcpyHostToDevice), "cudaMemcpy H2D");
}

void DeviceBuffer::download(void* dst, size_t bytes, size_t offset) const {
  SINKQ_CHECK(offset + bytes <= n_, "cuda: download of {} bytes at {} from a buffer of {}", bytes, offset, n_);
  if (bytes) check(cudaMemcpy(dst, static_cast<const char*>(p_) + offset, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy D2H");
}

void DeviceBuffer::fill_zero() {
  if (n_) check(cudaMemset(p_, 0, n_), "cudaMemset");
}

namespace {
// Grows b to at least `bytes` (contents not kept).
void reserve(DeviceBuffer& b, size_t bytes) {
  if (b.bytes() < bytes) b = DeviceBuffer(bytes);
}
}  // namespace

// ---- activations ---------------------------------------------------------------------------

DeviceCrossFold::DeviceCrossFold(const quant::CrossFold& f) : bits(f.bits), alpha(f.alpha), cols(f.cols()) {
  SINKQ_CHECK(cols >= 1 && (bits == 8 || bits == 4), "cuda linear: a CrossQuant fold of {} bits over {} columns", bits,
              cols);
  b = DeviceBuffer(size_t(cols) * sizeof(float));
  b.upload(f.b.data(), b.bytes());
}

void quantize(const float* x, int64_t T, int64_t cols, const ActQuant& q, DeviceActivations& act) {
  using lowbit::PackedFormat;
  const bool dynamic = q.format == PackedFormat::A8_PerToken || q.format == PackedFormat::A4_PerToken;
  SINKQ_CHECK(dynamic || q.format == PackedFormat::A8_PerTensor || q.format == PackedFormat::A4_PerTensor,
              "cuda linear: activations {} are not taken on the device (A8 / A4, per token or per tensor)",
              lowbit::traits(q.format).name);
  const int bits = lowbit::traits(q.format).bits;
  SINKQ_CHECK(T >= 1 && T <= 65535 && cols >= 1 && cols <= lowbit::kMaxCols,
              "cuda linear: {} tokens x {} features: need 1..65535 tokens, 1..{} features", T, cols, lowbit::kMaxCols);
  if (q.cross)
    SINKQ_CHECK(dynamic && q.cross->bits == bits && q.cross->cols == cols,
                "cuda linear: a CrossQuant fold of {} bits over {} columns for {} activations over {} features",
                q.cross->bits, q.cross->cols, lowbit::traits(q.format).name, cols);
  else if (dynamic)
    SINKQ_CHECK(q.clip > 0.0f && q.clip <= 1.0f, "cuda linear: clip ratio {} outside (0, 1]", q.clip);
  else
    SINKQ_CHECK(q.static_scale >= FLT_MIN && q.static_scale <= FLT_MAX,
                "cuda linear: static scale {} is not a positive normal fp32", q.static_scale);
  SINKQ_CHECK(x, "cuda linear: activations without their device pointer");
  act.T = T, act.cols = cols;
  act.ldc = (cols + 63) / 64 * 64;
  act.nsum = (cols + math::kSumCols - 1) / math::kSumCols;
  reserve(act.codes, size_t(T * act.ldc));
  reserve(act.scales, size_t(T) * sizeof(float));
  reserve(act.sums, size_t(T * act.nsum) * sizeof(int32_t));
  reserve(act.bad, sizeof(int64_t));
  const int64_t none = T;
  act.bad.upload(&none, sizeof none);
  // A token a kernel flagged: the first non-finite feature of its row, named.
  const auto refuse_bad = [&](const char* what) {
    check(cudaDeviceSynchronize(), what);
    int64_t bad = none;
    act.bad.download(&bad, sizeof bad);
    if (bad >= T) return;
    std::vector<float> row(static_cast<size_t>(cols));
    check(cudaMemcpy(row.data(), x + bad * cols, size_t(cols) * sizeof(float), cudaMemcpyDeviceToHost), "cudaMemcpy D2H");
    int64_t j = 0;
    while (j < cols && std::isfinite(row[size_t(j)])) ++j;
    fail("cuda linear: non-finite value {} at token {}, feature {}", j < cols ? row[size_t(j)] : NAN, bad, j);
  };
  detail::QuantArgs a;
  a.x = x, a.T = T, a.cols = cols, a.ldc = act.ldc;
  a.dynamic = dynamic, a.clip = q.clip, a.static_scale = q.static_scale, a.bits = bits;
  if (q.cross) {  // z = x / b and its two maxima on the device; the token scales by the CPU's function
    reserve(act.z, size_t(T * cols) * sizeof(float));
    reserve(act.maxima, size_t(2 * T) * sizeof(float));
    detail::CrossArgs c;
    c.x = x, c.b = q.cross->b.as<float>(), c.T = T, c.cols = cols;
    c.z = act.z.as<float>(), c.maxima = act.maxima.as<float>(), c.bad_token = act.bad.as<int64_t>();
    detail::launch_cross_fold(c, nullptr);
    check_launch("CrossQuant fold launch");
    refuse_bad("CrossQuant fold");
    std::vector<float> m(size_t(2 * T)), s(static_cast<size_t>(T));
    act.maxima.download(m.data(), m.size() * sizeof(float));
    for (int64_t t = 0; t < T; ++t)
      s[size_t(t)] = quant::cross_token_scale(bits, q.cross->alpha, m[size_t(2 * t)], m[size_t(2 * t + 1)]);
    act.scales.upload(s.data(), s.size() * sizeof(float));
    a.x = act.z.as<float>(), a.row_scales = act.scales.as<float>();
  }
  a.codes = act.codes.as<int8_t>(), a.scales = act.scales.as<float>(), a.sums = act.sums.as<int32_t>();
  a.bad_token = act.bad.as<int64_t>();
  detail::launch_quantize(a, nullptr);
  check_launch("activation quantization launch");
  refuse_bad("activation quantization");
}

// ---- DeviceLinear --------------------------------------------------------------------------

DeviceLinear::DeviceLinear(const lowbit::KernelWeights& w) : format_(w.format) {
  const lowbit::FormatDesc& t = lowbit::traits(w.format);
  SINKQ_CHECK(t.role == lowbit::Role::Weight, "cuda linear: {} is not a weight format", t.name);
  bits_ = t.bits;
  grouped_ = t.group > 0;
  asymmetric_ = !t.symmetric;
  rows_ = w.rows, cols_ = w.cols, steps_ = w.steps, groups_ = w.groups;
  const int sc = math::step_cols(bits_);
  const int64_t blocks = (rows_ + 15) / 16;
  SINKQ_CHECK(rows_ >= 1 && cols_ >= 1 && cols_ <= lowbit::kMaxCols && steps_ == (cols_ + sc - 1) / sc &&
                  w.codes.size() == size_t(blocks * steps_ * 64) && w.scales.size() == size_t(blocks * groups_ * 16) &&
                  w.zeros.size() == (asymmetric_ ? size_t(blocks * groups_ * 16) : size_t(0)),
              "cuda linear: {} weights [{}, {}] with inconsistent arrays (not lowbit::repack's)", t.name, rows_, cols_);
  SINKQ_CHECK(blocks <= 0x7fffffff, "cuda linear: {} rows is more blocks than a grid holds", rows_);
  if (grouped_) {
    const int64_t gcols = cols_ / groups_;
    SINKQ_CHECK(bits_ == 4 && gcols * groups_ == cols_ && gcols % math::kSumCols == 0 &&
                    math::kStepsPerPass % (gcols / sc) == 0,
                "cuda linear: {} groups of {} columns: the device kernel takes 4-bit groups of 32, 64, 128 or 256",
                t.name, gcols);
  }
  codes_ = DeviceBuffer(w.codes.size());
  codes_.upload(w.codes.data(), w.codes.size());
  scales_ = DeviceBuffer(w.scales.size() * sizeof(float));
  scales_.upload(w.scales.data(), scales_.bytes());
  if (asymmetric_) {
    zeros_ = DeviceBuffer(w.zeros.size() * sizeof(int32_t));
    zeros_.upload(w.zeros.data(), zeros_.bytes());
  }
}

detail::GemvArgs DeviceLinear::args(const DeviceActivations& act, const float* bias, float* y, int unroll) const {
  SINKQ_CHECK(act.cols == cols_, "cuda linear: activations have {} features, weights {}", act.cols, cols_);
  SINKQ_CHECK(unroll == 1 || unroll == 4, "cuda linear: unroll {} (1 or 4)", unroll);
  SINKQ_CHECK(y && act.T >= 1, "cuda linear: no output pointer, or activations not quantized");
  detail::GemvArgs a;
  a.unroll = unroll;
  a.bits = bits_, a.grouped = grouped_, a.asymmetric = asymmetric_;
  a.rows = rows_, a.cols = cols_, a.steps = steps_, a.groups = groups_;
  a.codes = codes_.as<uint8_t>(), a.wscales = scales_.as<float>(), a.wzeros = zeros_.as<int32_t>();
  a.xcodes = act.codes.as<int8_t>(), a.T = act.T, a.ldx = act.ldc;
  a.xscales = act.scales.as<float>(), a.xsums = act.sums.as<int32_t>(), a.nsum = act.nsum;
  a.bias = bias, a.y = y;
  return a;
}

void DeviceLinear::gemv(const DeviceActivations& act, const float* bias, float* y, int unroll) const {
  detail::launch_gemv(args(act, bias, y, unroll), nullptr);
  check_launch("gemv launch");
}

void DeviceLinear::gemm(const DeviceActivations& act, const float* bias, float* y) const {
  detail::GemvArgs a = args(act, bias, y, 4);
  detail::launch_gemm_tc(a, nullptr);
  check_launch("tensor-core gemm launch");
}

void DeviceLinear::forward(const float* x, int64_t T, const ActQuant& q, const float* bias, float* y,
                           DeviceActivations& scratch, int unroll) const {
  quantize(x, T, cols_, q, scratch);
  if (T >= kGemmMinTokens) gemm(scratch, bias, y);
  else gemv(scratch, bias, y, unroll);
  check(cudaDeviceSynchronize(), "linear");
}

}  // namespace sinkq::cuda
