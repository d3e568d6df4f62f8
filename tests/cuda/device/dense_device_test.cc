// tests/cuda/device/dense_device_test.cc — the full-precision linear on the device (cuda/dense.h)
// against the double reference sinkq::ref::matmul, on a GPU: F32 / F16 / BF16 weights, row widths
// that take the 16-byte path and ones that do not, 1..20 tokens (one or several passes of
// kDenseTokens), with and without a bias; every output written (poisoned with NaN first), within
// the bound dense.h states. Run by scripts/device_check.sh (see linear_device_test.cc).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "cuda/dense.h"
#include "device_util.h"
#include "kernels/ops.h"

namespace sinkq::cuda {
namespace {

using devtest::from_device;
using devtest::to_device;

constexpr double kU = 0x1p-24;
double gamma(double n) { return n * kU / (1.0 - n * kU); }

void check_dense(std::mt19937_64& rng, DType dt, int64_t N, int64_t K, int64_t T, bool with_bias) {
  SCOPED_TRACE(std::string(dtype_name(dt)) + " N=" + std::to_string(N) + " K=" + std::to_string(K) +
               " T=" + std::to_string(T) + (with_bias ? " bias" : ""));
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> w32(static_cast<size_t>(N * K)), x(static_cast<size_t>(T * K)), bias(static_cast<size_t>(N));
  for (float& v : w32) v = d(rng);
  for (size_t i = 0; i < x.size(); ++i) x[i] = d(rng) * (i % 97 == 5 ? 50.0f : 1.0f);  // a few massive channels
  for (float& v : bias) v = d(rng);
  std::vector<uint16_t> w16(w32.size());
  for (size_t i = 0; i < w32.size(); ++i) w16[i] = dt == DType::BF16 ? f32_to_bf16(w32[i]) : f32_to_f16(w32[i]);
  std::vector<float> wv(w32.size());  // the weights as the device reads them
  for (size_t i = 0; i < w32.size(); ++i)
    wv[i] = dt == DType::F32 ? w32[i] : dt == DType::BF16 ? bf16_to_f32(w16[i]) : f16_to_f32(w16[i]);
  Mat m;
  m.dtype = dt, m.rows = N, m.cols = K, m.name = "model.layers.0.mlp.down_proj.weight";
  m.data = dt == DType::F32 ? static_cast<const void*>(w32.data()) : w16.data();
  std::vector<float> want(size_t(T * N));
  ref::matmul(x.data(), T, m, with_bias ? bias.data() : nullptr, want.data());
  const DeviceMat dm(m);
  const DeviceBuffer xd = to_device(x), bd = to_device(bias);
  DeviceBuffer yd = to_device(std::vector<float>(size_t(T * N), NAN));
  dm.matmul(xd.as<float>(), T, with_bias ? bd.as<float>() : nullptr, yd.as<float>());
  const std::vector<float> got = from_device(yd, size_t(T * N));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t r = 0; r < N; ++r) {
      double mag = 0;
      for (int64_t k = 0; k < K; ++k) mag += std::fabs(double(x[size_t(t * K + k)]) * wv[size_t(r * K + k)]);
      const size_t i = size_t(t * N + r);
      ASSERT_LE(std::fabs(double(got[i]) - double(want[i])), gamma(double(K + 1)) * mag + 2 * kU * std::fabs(double(want[i])))
          << "t " << t << " row " << r << ": " << got[i] << " vs " << want[i];
    }
}

TEST(CudaDense, WithinTheBoundOfTheDoubleReference) {
  std::string why;
  ASSERT_TRUE(device_available(&why)) << "no CUDA device: " << why;
  std::mt19937_64 rng(4049);
  for (const DType dt : {DType::F32, DType::F16, DType::BF16})
    for (const auto& [N, K] : std::vector<std::pair<int64_t, int64_t>>{{37, 576}, {300, 1001}, {5, 12}, {1536, 8960}})
      for (const int64_t T : {int64_t(1), int64_t(5), int64_t(20)}) check_dense(rng, dt, N, K, T, T != 5);
}

TEST(CudaDense, SmallCasesForTheSanitizers) {
  std::string why;
  ASSERT_TRUE(device_available(&why)) << "no CUDA device: " << why;
  std::mt19937_64 rng(4050);
  check_dense(rng, DType::F16, 9, 72, 10, true);
  check_dense(rng, DType::F32, 9, 70, 3, false);
}

TEST(CudaDense, RefusesBadArguments) {
  std::string why;
  ASSERT_TRUE(device_available(&why)) << "no CUDA device: " << why;
  std::vector<uint16_t> blocks(64);
  Mat q;
  q.dtype = DType::Q4_K, q.rows = 1, q.cols = 256, q.data = blocks.data(), q.name = "output.weight";
  EXPECT_THAT([&] { DeviceMat m(q); }, ::testing::ThrowsMessage<Error>(::testing::HasSubstr("output.weight is Q4_K")));
  std::vector<float> w(8 * 8, 1.0f);
  Mat f;
  f.dtype = DType::F32, f.rows = 8, f.cols = 8, f.data = w.data();
  const DeviceMat dm(f);
  DeviceBuffer b(64 * sizeof(float));
  EXPECT_THROW(dm.matmul(b.as<float>(), 1, nullptr, b.as<float>()), Error);  // y aliases x
  EXPECT_THROW(dm.matmul(nullptr, 1, nullptr, b.as<float>()), Error);
}

}  // namespace
}  // namespace sinkq::cuda
