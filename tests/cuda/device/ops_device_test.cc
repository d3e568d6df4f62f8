// tests/cuda/device/ops_device_test.cc — the device's element-wise operators (cuda/ops.h) against
// the CPU, on a GPU: RoPE, the residual add, the embedding rows and the online Hadamard bit for bit
// (sinkq::rope_apply_cs, fp32 addition, sinkq::embed_rows, ref::hadamard_rows); RMSNorm and
// SwiGLU within the bounds cuda/ops_math.h derives against the double references (ref::rmsnorm,
// ref::silu_mul). Outputs are poisoned with NaN first where the op writes a separate buffer; bad
// arguments are refused naming them. Run by scripts/device_check.sh (see linear_device_test.cc).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "cuda/ops.h"
#include "cuda/ops_math.h"
#include "device_util.h"
#include "kernels/hadamard_kernels.h"
#include "kernels/ops.h"

namespace sinkq::cuda {
namespace {

using devtest::from_device;
using devtest::to_device;

uint32_t bits_of(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

std::vector<float> normal(std::mt19937_64& rng, size_t n, float sd = 1.0f) {
  std::normal_distribution<float> d(0.0f, sd);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

void expect_bits(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_EQ(bits_of(got[i]), bits_of(want[i])) << what << " at " << i << ": " << got[i] << " vs " << want[i];
}

class CudaOps : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    ASSERT_TRUE(device_available(&why)) << "no CUDA device: " << why;
  }
};

void check_rmsnorm(std::mt19937_64& rng, int64_t T, int64_t n, bool in_place) {
  SCOPED_TRACE("rmsnorm T=" + std::to_string(T) + " n=" + std::to_string(n) + (in_place ? " in place" : ""));
  std::vector<float> x = normal(rng, size_t(T * n)), w = normal(rng, size_t(n), 0.3f);
  for (float& v : w) v += 1.0f;
  for (int64_t k = 5; k < n && T > 1; k += 97) x[size_t(n + k)] *= 1800.0f;  // token 1: massive channels
  const float eps = 1e-6f;
  std::vector<float> want(x.size());
  ref::rmsnorm(x.data(), w.data(), want.data(), T, n, eps);
  DeviceBuffer xd = to_device(x), wd = to_device(w), yd = to_device(std::vector<float>(x.size(), NAN));
  float* y = in_place ? xd.as<float>() : yd.as<float>();
  rmsnorm(xd.as<float>(), wd.as<float>(), y, T, n, eps);
  const std::vector<float> got = from_device(in_place ? xd : yd, x.size());
  const double bound = math::rmsnorm_rel_bound(n);
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_LE(std::fabs(double(got[i]) - double(want[i])), bound * std::fabs(double(want[i])))
        << "at " << i << ": " << got[i] << " vs " << want[i];
}

TEST_F(CudaOps, RmsNormWithinItsBound) {
  std::mt19937_64 rng(40);
  for (const int64_t n : {1, 3, 576, 1536, 2048, 8960})
    for (const int64_t T : {1, 7}) check_rmsnorm(rng, T, n, false);
  check_rmsnorm(rng, 3, 1536, true);
}

TEST_F(CudaOps, RopeIsTheCpusBitForBit) {
  std::mt19937_64 rng(41);
  RopeParams p;
  p.head_dim = 64;
  const RopeTable rt = RopeTable::make(p);
  for (const auto& [T, H, D] : std::vector<std::tuple<int64_t, int, int>>{{1, 9, 64}, {5, 12, 64}, {300, 2, 64}}) {
    std::vector<float> x = normal(rng, size_t(T * H * D), 2.0f), cs(size_t(T * D));
    for (int64_t t = 0; t < T; ++t) rope_cos_sin(rt, int32_t(1000 + 37 * t), cs.data() + t * D);
    std::vector<float> want = x;
    rope_apply_cs(cs.data(), D, want.data(), T, H);
    DeviceBuffer xd = to_device(x), csd = to_device(cs);
    rope_apply_cs(csd.as<float>(), D, xd.as<float>(), T, H);
    expect_bits(from_device(xd, x.size()), want, "rope T=" + std::to_string(T));
  }
}

TEST_F(CudaOps, SiluMulWithinItsBoundAndAddBitForBit) {
  std::mt19937_64 rng(42);
  std::vector<float> g = normal(rng, 100003, 4.0f), u = normal(rng, g.size());
  for (const float v : {0.0f, -0.0f, 1e-30f, 88.0f, -88.0f, -88.8f, -100.0f, 100.0f}) g.push_back(v), u.push_back(1.5f);
  std::vector<float> want = g;
  ref::silu_mul(want.data(), u.data(), 1, int64_t(g.size()));
  DeviceBuffer gd = to_device(g), ud = to_device(u);
  silu_mul(gd.as<float>(), ud.as<float>(), int64_t(g.size()));
  const std::vector<float> got = from_device(gd, g.size());
  for (size_t i = 0; i < g.size(); ++i)
    ASSERT_LE(std::fabs(double(got[i]) - double(want[i])),
              math::silu_rel_bound() * std::fabs(double(want[i])) + math::kSiluAbsSlack * (1.0 + std::fabs(double(u[i]))))
        << "g " << g[i] << " u " << u[i] << ": " << got[i] << " vs " << want[i];

  std::vector<float> sum = g;
  for (size_t i = 0; i < g.size(); ++i) sum[i] = g[i] + u[i];
  DeviceBuffer xd = to_device(g);
  add(xd.as<float>(), ud.as<float>(), int64_t(g.size()));
  expect_bits(from_device(xd, g.size()), sum, "add");
}

TEST_F(CudaOps, EmbeddingRowsAreTheCpusBitForBit) {
  std::mt19937_64 rng(43);
  const int64_t V = 1000, C = 576;
  const std::vector<float> f32 = normal(rng, size_t(V * C));
  std::vector<uint16_t> f16(f32.size()), bf16(f32.size());
  for (size_t i = 0; i < f32.size(); ++i) f16[i] = f32_to_f16(f32[i]), bf16[i] = f32_to_bf16(f32[i]);
  f16[7] = 0x0001, f16[8] = 0x7e01, bf16[9] = 0xffc1;  // a subnormal and NaNs with payloads (row 0)
  const std::vector<int32_t> ids = {0, 999, 3, 0, 500};
  for (const DType dt : {DType::F32, DType::F16, DType::BF16}) {
    Mat t;
    t.dtype = dt, t.rows = V, t.cols = C, t.name = "model.embed_tokens.weight";
    t.data = dt == DType::F32 ? static_cast<const void*>(f32.data())
                              : dt == DType::F16 ? static_cast<const void*>(f16.data()) : bf16.data();
    std::vector<float> want(ids.size() * size_t(C));
    embed_rows(t, ids, want.data());
    const DeviceTable table(t);
    DeviceBuffer out = to_device(std::vector<float>(want.size(), NAN)), scratch;
    table.gather(ids, out.as<float>(), scratch);
    expect_bits(from_device(out, want.size()), want, std::string("embedding ") + std::string(dtype_name(dt)));
    const std::vector<int32_t> bad = {1, 1000};
    try {
      table.gather(bad, out.as<float>(), scratch);
      ADD_FAILURE() << "an id past the vocabulary was accepted";
    } catch (const Error& e) {
      EXPECT_THAT(e.what(), ::testing::HasSubstr("token id 1000 (position 1) is outside the vocabulary [0, 1000) of "
                                                 "model.embed_tokens.weight"));
    }
  }
}

// Random ±1 vectors and base matrices: the kernel takes any ±1 entries (hadamard_kernels.h).
std::vector<float> signs(std::mt19937_64& rng, size_t n) {
  std::vector<float> v(n);
  for (float& s : v) s = (rng() & 1) ? 1.0f : -1.0f;
  return v;
}

void check_hadamard(std::mt19937_64& rng, int64_t rows, int64_t pow2, int m, bool with_signs) {
  SCOPED_TRACE("hadamard rows=" + std::to_string(rows) + " pow2=" + std::to_string(pow2) + " m=" + std::to_string(m));
  const int64_t n = pow2 * m;
  const std::vector<float> base = signs(rng, size_t(m) * size_t(m)), pre = signs(rng, size_t(n)), post = signs(rng, size_t(n));
  std::vector<float> x = normal(rng, size_t(rows * n), 3.0f);
  x[0] = -0.0f;  // signed zeros go through the m-step's 0 + · and the butterflies as the CPU's do
  const float scale = 1.0f / std::sqrt(float(n));
  const float* pr = with_signs ? pre.data() : nullptr;
  const float* po = with_signs ? post.data() : nullptr;
  std::vector<float> want = x;
  ref::hadamard_rows(want.data(), rows, pow2, m, base.data(), scale, pr, po);
  const DeviceHadamard h(pow2, m, base.data(), scale, pr, po);
  DeviceBuffer xd = to_device(x);
  h.apply(xd.as<float>(), rows);
  expect_bits(from_device(xd, x.size()), want, "hadamard");
}

TEST_F(CudaOps, HadamardIsTheReferenceBitForBit) {
  std::mt19937_64 rng(44);
  check_hadamard(rng, 3, 64, 1, false);     // R3 on a head of 64
  check_hadamard(rng, 2, 128, 1, true);
  check_hadamard(rng, 3, 512, 3, true);     // SmolLM2's intermediate 1536 = 2^9 · 3
  check_hadamard(rng, 2, 256, 35, false);   // the 1.5B's 8960 = 2^8 · 35
  check_hadamard(rng, 2, 2048, 7, true);    // 7B's 14336 = 2^11 · 7: 57 KB of shared memory (opt-in)
  check_hadamard(rng, 70000, 16, 1, false); // more rows than one grid's 65,535 blocks
}

// A few cases for compute-sanitizer's memcheck / racecheck (scripts/device_check.sh).
TEST_F(CudaOps, SmallCasesForTheSanitizers) {
  std::mt19937_64 rng(45);
  check_rmsnorm(rng, 2, 300, false);
  check_hadamard(rng, 2, 32, 3, true);
  std::vector<float> x = normal(rng, 2 * 3 * 8), cs(2 * 8, 0.5f), want = x;
  rope_apply_cs(cs.data(), 8, want.data(), 2, 3);
  DeviceBuffer xd = to_device(x), csd = to_device(cs);
  rope_apply_cs(csd.as<float>(), 8, xd.as<float>(), 2, 3);
  expect_bits(from_device(xd, x.size()), want, "rope");
}

TEST_F(CudaOps, RefusesBadArguments) {
  DeviceBuffer b(64 * sizeof(float));
  EXPECT_THROW(rmsnorm(b.as<float>(), b.as<float>(), b.as<float>(), 1, 0, 1e-6f), Error);
  EXPECT_THROW(rmsnorm(nullptr, b.as<float>(), b.as<float>(), 1, 4, 1e-6f), Error);
  EXPECT_THROW(rope_apply_cs(b.as<float>(), 7, b.as<float>(), 1, 1), Error);  // odd head_dim
  EXPECT_THROW(silu_mul(nullptr, b.as<float>(), 4), Error);
  EXPECT_THROW(add(b.as<float>(), nullptr, 4), Error);
  EXPECT_THROW(DeviceHadamard(48, 1, nullptr, 1.0f), Error);         // not a power of two
  EXPECT_THROW(DeviceHadamard(4, 3, nullptr, 1.0f), Error);          // m > 1 without a base
  EXPECT_THROW(DeviceHadamard(1 << 20, 1, nullptr, 1.0f), Error);    // 4 MB rows: no block holds one
  Mat q;
  q.dtype = DType::Q4_K, q.rows = 2, q.cols = 256, q.data = b.get(), q.name = "token_embd.weight";
  EXPECT_THAT([&] { DeviceTable t(q); }, ::testing::ThrowsMessage<Error>(::testing::HasSubstr("token_embd.weight is Q4_K")));
}

}  // namespace
}  // namespace sinkq::cuda
