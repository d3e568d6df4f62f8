// tests/cuda/device/linear_device_test.cc — the device linear (cuda/linear.h) against the CPU, on a
// GPU: the activation codes, scales and outputs bit for bit lowbit::quantize_dynamic /
// quantize_static + lowbit::gemm (which equals lowbit::ref::gemm bit for bit) on every weight
// format × A8 / A4 activations, odd shapes, decode and multi-token calls (both GEMV variants and
// the tensor-core GEMM), clipped codes and a bias; every output element written (the output is
// poisoned with NaN first); fresh random inputs per case; bad input refused with the token and
// feature named. Built with -DSINKQ_CUDA=ON, not registered with ctest
// (CI has no GPU): scripts/device_check.sh runs it, and under compute-sanitizer. Without a device
// it fails, it does not skip: it is only ever run where one must be.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "cuda/linear.h"
#include "device_util.h"
#include "formats/quantizer.h"
#include "formats/uniform_int.h"
#include "lowbit/formats.h"
#include "lowbit/kernels.h"
#include "quant/crossquant.h"

namespace sinkq::cuda {
namespace {

using lowbit::KernelWeights;
using lowbit::PackedFormat;
using lowbit::PackedTensor;

const PackedFormat kWeights[] = {PackedFormat::W8_PerRow,   PackedFormat::W4_PerRow,    PackedFormat::W4_G32,
                                 PackedFormat::W4_G64,      PackedFormat::W4_G128,      PackedFormat::W4_G32_Asym,
                                 PackedFormat::W4_G64_Asym, PackedFormat::W4_G128_Asym};

std::vector<float> normal(std::mt19937_64& rng, int64_t n, int64_t outlier_every, float outlier) {
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = d(rng) * (outlier_every > 0 && i % outlier_every == 3 ? outlier : 1.0f);
  return v;
}

using devtest::from_device;
using devtest::to_device;

class CudaLinear : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    ASSERT_TRUE(device_available(&why)) << "no CUDA device: " << why;
  }
};

// One case: W in format wf, x [T, K], optional bias; the device's y against the CPU's bits, and
// the device's activation codes / scales against lowbit's.
void check_case(std::mt19937_64& rng, PackedFormat wf, int64_t N, int64_t K, int64_t T, bool static_act, float wclip,
                bool with_bias, int abits = 8) {
  const PackedFormat dyn = abits == 8 ? PackedFormat::A8_PerToken : PackedFormat::A4_PerToken;
  const PackedFormat stat = abits == 8 ? PackedFormat::A8_PerTensor : PackedFormat::A4_PerTensor;
  SCOPED_TRACE(std::string(lowbit::traits(wf).name) + " N=" + std::to_string(N) + " K=" + std::to_string(K) +
               " T=" + std::to_string(T) + (static_act ? " static" : " dynamic") + " A" + std::to_string(abits) +
               " wclip=" + std::to_string(wclip) +
               (with_bias ? " bias" : ""));
  const std::vector<float> wv = normal(rng, N * K, 7, 6.0f), xv = normal(rng, T * K, 11, 40.0f);
  const std::vector<float> bias = normal(rng, N, 0, 1.0f);
  const PackedTensor wp = lowbit::quantize(wf, wv.data(), N, K, wclip);
  const KernelWeights kw = lowbit::repack(wp);
  PackedTensor xp;
  ActQuant aq;
  if (static_act) {
    const quant::Params p = quant::compute_params(lowbit::quant_spec(stat, 0.9f), xv.data(), T, K);
    lowbit::quantize_static(stat, xv.data(), T, K, p, xp);
    aq.format = stat;
    aq.static_scale = p.scale[0];
  } else {
    aq.format = dyn;
    lowbit::quantize_dynamic(dyn, xv.data(), T, K, 1.0f, xp);
  }
  std::vector<float> want(size_t(T * N));
  lowbit::gemm(xp, kw, with_bias ? bias.data() : nullptr, want.data());

  const DeviceLinear dl(kw);
  const DeviceBuffer x = to_device(xv), b = to_device(bias);
  DeviceActivations act;
  for (const int unroll : {1, 4}) {  // both GEMV variants: the same bits
    DeviceBuffer y = to_device(std::vector<float>(size_t(T * N), NAN));  // poisoned: every element must be written
    dl.forward(x.as<float>(), T, aq, with_bias ? b.as<float>() : nullptr, y.as<float>(), act, unroll);
    const std::vector<float> got = from_device(y, size_t(T * N));
    for (size_t i = 0; i < got.size(); ++i) ASSERT_FALSE(std::isnan(got[i])) << "y[" << i << "] not written, unroll " << unroll;
    ASSERT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * sizeof(float)))
        << "unroll " << unroll << ", first y: device " << got[0] << ", cpu " << want[0];
  }

  {  // the tensor-core path at this T too (forward() takes it from kGemmMinTokens tokens on)
    DeviceBuffer y = to_device(std::vector<float>(size_t(T * N), NAN));
    quantize(x.as<float>(), T, K, aq, act);
    dl.gemm(act, with_bias ? b.as<float>() : nullptr, y.as<float>());
    const std::vector<float> got = from_device(y, size_t(T * N));
    for (size_t i = 0; i < got.size(); ++i) ASSERT_FALSE(std::isnan(got[i])) << "y[" << i << "] not written, tensor cores";
    ASSERT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * sizeof(float)))
        << "tensor cores, first y: device " << got[0] << ", cpu " << want[0];
  }

  std::vector<int8_t> codes(size_t(T * act.ldc));
  act.codes.download(codes.data(), codes.size());
  std::vector<float> scales(static_cast<size_t>(T));
  act.scales.download(scales.data(), scales.size() * sizeof(float));
  for (int64_t t = 0; t < T; ++t) {
    const int64_t rb = formats::uniform::row_bytes(abits, K);  // A4: packed on the CPU, one per byte here
    for (int64_t j = 0; j < K; ++j)
      ASSERT_EQ(formats::uniform::code_at(xp.codes.data() + t * rb, j, abits), int(codes[size_t(t * act.ldc + j)]))
          << "token " << t << ", column " << j;
    for (int64_t j = K; j < act.ldc; ++j) ASSERT_EQ(codes[size_t(t * act.ldc + j)], 0) << "padding of token " << t;
    ASSERT_EQ(std::memcmp(&scales[size_t(t)], &xp.scales[static_act ? 0 : size_t(t)], sizeof(float)), 0);
  }
}

TEST_F(CudaLinear, EqualsTheCpuBitForBitOnEveryWeightFormat) {
  std::mt19937_64 rng(4040);
  for (const PackedFormat wf : kWeights) {
    const int g = lowbit::traits(wf).group;
    const std::vector<int64_t> ks = g > 0 ? std::vector<int64_t>{g, 5 * int64_t(g), 1536}
                                          : std::vector<int64_t>{3, 100, 257, 1536};
    for (const int64_t K : ks)
      for (const int64_t N : {int64_t(1), int64_t(37), int64_t(300)})
        for (const int64_t T : {int64_t(1), int64_t(5), int64_t(70)})  // 70: two tensor-core token tiles
          for (const bool static_act : {false, true})
            for (const int abits : {8, 4})  // W8A8 / W4A8 and W8A4 / W4A4 (PrefixQuant's)
              check_case(rng, wf, N, K, T, static_act, static_act ? 0.8f : 1.0f, T == 5, abits);
  }
}

// A few cases per format, small enough for compute-sanitizer's memcheck and racecheck
// (scripts/device_check.sh runs them there): groups spanning passes, a partial row block, T = 2.
TEST_F(CudaLinear, SmallCasesForTheSanitizers) {
  std::mt19937_64 rng(4043);
  for (const PackedFormat wf : kWeights) {
    const int g = lowbit::traits(wf).group;
    check_case(rng, wf, 37, g > 0 ? 40 * int64_t(g) : 1100, 2, false, 1.0f, true);
  }
}

TEST_F(CudaLinear, EqualsTheCpuAtModelShapes) {
  std::mt19937_64 rng(4041);
  // SmolLM2 (576 / 1536), the 1B shape (2048 / 5632) and the 1.5B (1536 / 8960), decode and a short prefill.
  const int64_t shapes[][2] = {{576, 1536}, {1536, 576}, {5632, 2048}, {2048, 5632}, {8960, 1536}, {1536, 8960}};
  for (const auto& s : shapes)
    for (const PackedFormat wf : {PackedFormat::W8_PerRow, PackedFormat::W4_G128_Asym, PackedFormat::W4_G32_Asym})
      for (const int64_t T : {int64_t(1), int64_t(16)}) check_case(rng, wf, s[0], s[1], T, false, 1.0f, false);
}

// CrossQuant's static columns folded (quant/crossquant.h): z = x / b on the device, the token
// scales from its two maxima by the CPU's cross_token_scale, the codes at them — the CPU's codes,
// scales and outputs bit for bit (quant::cross_fold_scales + lowbit::quantize_rows + lowbit::gemm),
// at A8 (a value above its calibrated column maximum widens its row) and A4 (clamped), α 0.15 and
// 1 (dynamic per token); a non-finite input named.
TEST_F(CudaLinear, CrossQuantFoldIsTheCpusBitForBit) {
  std::mt19937_64 rng(4044);
  for (const int abits : {8, 4})
    for (const float alpha : {0.15f, 1.0f})
      for (const int64_t T : {int64_t(1), int64_t(20)}) {
        SCOPED_TRACE("A" + std::to_string(abits) + " alpha " + std::to_string(alpha) + " T " + std::to_string(T));
        const int64_t N = 37, K = 576;
        const PackedFormat af = abits == 8 ? PackedFormat::A8_PerToken : PackedFormat::A4_PerToken;
        const std::vector<float> calib = normal(rng, 64 * K, 11, 40.0f);
        std::vector<float> colmax(static_cast<size_t>(K), 0.0f);
        for (int64_t i = 0; i < 64; ++i)
          for (int64_t j = 0; j < K; ++j) colmax[size_t(j)] = std::max(colmax[size_t(j)], std::fabs(calib[size_t(i * K + j)]));
        colmax[7] = 0.0f;  // a column calibration never saw nonzero: not folded (b = 1)
        const quant::CrossFold fold = quant::make_cross_fold(abits, alpha, colmax);
        std::vector<float> xv = normal(rng, T * K, 11, 40.0f);
        xv[size_t(K / 2)] = 3.0f * colmax[size_t(K / 2)];  // above its calibrated maximum
        std::vector<float> z(xv.size()), sc(static_cast<size_t>(T));
        quant::cross_fold_scales(fold, xv.data(), T, K, z.data(), sc.data());
        PackedTensor xp;
        lowbit::quantize_rows(af, z.data(), T, K, sc.data(), xp);
        const std::vector<float> wv = normal(rng, N * K, 7, 6.0f);
        const KernelWeights kw = lowbit::repack(lowbit::quantize(PackedFormat::W4_G128_Asym, wv.data(), N, K));
        std::vector<float> want(size_t(T * N));
        lowbit::gemm(xp, kw, nullptr, want.data());

        const DeviceLinear dl(kw);
        const DeviceCrossFold dfold(fold);
        ActQuant aq;
        aq.format = af, aq.cross = &dfold;
        const DeviceBuffer x = to_device(xv);
        DeviceActivations act;
        DeviceBuffer y = to_device(std::vector<float>(size_t(T * N), NAN));
        dl.forward(x.as<float>(), T, aq, nullptr, y.as<float>(), act);
        const std::vector<float> got = from_device(y, size_t(T * N));
        ASSERT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * sizeof(float)));
        const std::vector<float> scales = from_device(act.scales, size_t(T));
        ASSERT_EQ(0, std::memcmp(scales.data(), sc.data(), sc.size() * sizeof(float)));
        std::vector<int8_t> codes(size_t(T * act.ldc));
        act.codes.download(codes.data(), codes.size());
        const int64_t rb = formats::uniform::row_bytes(abits, K);
        for (int64_t t = 0; t < T; ++t)
          for (int64_t j = 0; j < K; ++j)
            ASSERT_EQ(formats::uniform::code_at(xp.codes.data() + t * rb, j, abits), int(codes[size_t(t * act.ldc + j)]))
                << "token " << t << ", column " << j;
        xv[size_t((T - 1) * K + 9)] = NAN;
        const DeviceBuffer xb = to_device(xv);
        try {
          dl.forward(xb.as<float>(), T, aq, nullptr, y.as<float>(), act);
          ADD_FAILURE() << "a NaN input was accepted";
        } catch (const Error& e) {
          EXPECT_THAT(e.what(), ::testing::HasSubstr("token " + std::to_string(T - 1) + ", feature 9"));
        }
      }
}

TEST_F(CudaLinear, RefusesNonFiniteInputNamingTokenAndFeature) {
  std::mt19937_64 rng(4042);
  const std::vector<float> wv = normal(rng, 32 * 64, 0, 1.0f);
  const DeviceLinear dl(lowbit::repack(lowbit::quantize(PackedFormat::W8_PerRow, wv.data(), 32, 64)));
  std::vector<float> xv = normal(rng, 3 * 64, 0, 1.0f);
  xv[size_t(2 * 64 + 17)] = INFINITY;
  const DeviceBuffer x = to_device(xv);
  DeviceBuffer y(3 * 32 * sizeof(float));
  DeviceActivations act;
  try {
    dl.forward(x.as<float>(), 3, ActQuant{}, nullptr, y.as<float>(), act);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("token 2, feature 17"));
  }
  // And the bad calls the host refuses before launching anything.
  EXPECT_THROW(dl.forward(x.as<float>(), 0, ActQuant{}, nullptr, y.as<float>(), act), Error);
  EXPECT_THROW(dl.forward(nullptr, 3, ActQuant{}, nullptr, y.as<float>(), act), Error);
  EXPECT_THROW(dl.forward(x.as<float>(), 3, ActQuant{}, nullptr, nullptr, act), Error);
  EXPECT_THROW(dl.forward(x.as<float>(), 3, ActQuant{PackedFormat::W8_PerRow}, nullptr, y.as<float>(), act), Error);
  EXPECT_THROW(dl.forward(x.as<float>(), 3, ActQuant{PackedFormat::A8_PerTensor, 1.0f, 0.0f}, nullptr, y.as<float>(), act),
               Error);
}

}  // namespace
}  // namespace sinkq::cuda
