// tests/cuda/ops_math_test.cc — the device's element-wise arithmetic (cuda/ops_math.h), replayed
// on the host (no GPU): the parts that must be the CPU's bits are held to the CPU operators bit
// for bit (RoPE's pair rotation against sinkq::rope_apply_cs; the f16 / bf16 widening against
// core/dtype.h on every one of the 65,536 codes), and the parts that are not to the bounds
// ops_math.h derives (RMSNorm summed in the device kernel's order, SwiGLU's formula) against the
// double references. The device kernels (cuda/ops_kernels.cu) call these functions; the device
// test (tests/cuda/device/ops_device_test.cc) holds them to the same checks on a GPU.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "cuda/ops_math.h"
#include "kernels/hadamard_kernels.h"
#include "kernels/ops.h"

namespace sinkq::cuda {
namespace {

namespace m = math;

uint32_t bits_of(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

TEST(CudaOpsMath, WideningIsCoreDtypesOnEveryCode) {
  for (uint32_t h = 0; h < 0x10000u; ++h) {
    ASSERT_EQ(bits_of(m::widen_f16(uint16_t(h))), bits_of(f16_to_f32(uint16_t(h)))) << "f16 0x" << std::hex << h;
    ASSERT_EQ(bits_of(m::widen_bf16(uint16_t(h))), bits_of(bf16_to_f32(uint16_t(h)))) << "bf16 0x" << std::hex << h;
  }
}

TEST(CudaOpsMath, RopePairIsTheCpusRotationBitForBit) {
  std::mt19937_64 rng(3);
  std::normal_distribution<float> d(0.0f, 3.0f);
  std::uniform_real_distribution<float> a(-3.2f, 3.2f);
  for (const int D : {2, 64, 128}) {
    const int64_t T = 5;
    const int H = 7, half = D / 2;
    std::vector<float> x(size_t(T * H * D)), cs(size_t(T * D));
    for (float& v : x) v = d(rng);
    for (int64_t t = 0; t < T; ++t)
      for (int i = 0; i < half; ++i) {
        const float ang = a(rng);
        cs[size_t(t * D + i)] = std::cos(ang), cs[size_t(t * D + half + i)] = std::sin(ang);
      }
    std::vector<float> cpu = x, dev = x;
    rope_apply_cs(cs.data(), D, cpu.data(), T, H);
    for (int64_t th = 0; th < T * H; ++th)  // the device kernel's loop (ops_kernels.cu rope_kernel)
      for (int i = 0; i < half; ++i) {
        float* v = dev.data() + th * D;
        const float* c = cs.data() + (th / H) * D;
        m::rope_pair(v[i], v[i + half], c[i], c[half + i]);
      }
    for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(bits_of(dev[i]), bits_of(cpu[i])) << "D " << D << " i " << i;
  }
}

// ops_kernels.cu rmsnorm_kernel's order on the host: thread i sums x[i]², x[i + 256]², … from 0,
// then the 256 partial sums as a binary tree; r and y by the shared functions.
std::vector<float> rmsnorm_device_order(const std::vector<float>& x, const std::vector<float>& w, int64_t T,
                                        int64_t n, float eps) {
  std::vector<float> y(x.size());
  for (int64_t t = 0; t < T; ++t) {
    const float* xr = x.data() + t * n;
    float part[m::kRmsThreads];
    for (int i = 0; i < m::kRmsThreads; ++i) {
      float acc = 0.0f;
      for (int64_t k = i; k < n; k += m::kRmsThreads) acc = m::add_rn(acc, m::mul_rn(xr[k], xr[k]));
      part[i] = acc;
    }
    for (int s = m::kRmsThreads / 2; s > 0; s >>= 1)
      for (int i = 0; i < s; ++i) part[i] = m::add_rn(part[i], part[i + s]);
    const float r = m::rms_inv(part[0], n, eps);
    for (int64_t k = 0; k < n; ++k) y[size_t(t * n + k)] = m::rms_apply(xr[k], r, w[size_t(k)]);
  }
  return y;
}

TEST(CudaOpsMath, RmsNormInTheDeviceOrderIsWithinItsBound) {
  std::mt19937_64 rng(11);
  std::normal_distribution<float> d(0.0f, 1.0f);
  for (const int64_t n : {1, 3, 255, 576, 1536, 2048, 8960}) {
    const int64_t T = 4;
    std::vector<float> x(static_cast<size_t>(T * n)), w(static_cast<size_t>(n));
    for (float& v : w) v = 1.0f + 0.5f * d(rng);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t k = 0; k < n; ++k) {
        float v = d(rng);
        if (t == 1 && k % 97 == 5) v *= 1800.0f;  // a sink token's massive channels
        if (t == 2) v *= 1e-4f;                   // eps matters here: var ~1e-8 against eps 1e-6
        if (t == 3 && k == n / 2) v = 0.0f;
        x[size_t(t * n + k)] = v;
      }
    const float eps = 1e-6f;
    const std::vector<float> dev = rmsnorm_device_order(x, w, T, n, eps);
    std::vector<float> ref(x.size());
    ref::rmsnorm(x.data(), w.data(), ref.data(), T, n, eps);
    const double bound = m::rmsnorm_rel_bound(n);
    for (size_t i = 0; i < x.size(); ++i)
      ASSERT_LE(std::fabs(double(dev[i]) - double(ref[i])), bound * std::fabs(double(ref[i])))
          << "n " << n << " i " << i << ": " << dev[i] << " vs " << ref[i];
  }
}

TEST(CudaOpsMath, SiluMulFormulaIsWithinItsBound) {
  std::mt19937_64 rng(5);
  std::normal_distribution<float> d(0.0f, 4.0f);
  std::vector<float> g, u;
  for (int i = 0; i < 20000; ++i) g.push_back(d(rng)), u.push_back(d(rng));
  for (const float v : {0.0f, -0.0f, 1e-30f, -1e-30f, 20.0f, -20.0f, 88.0f, -88.0f, -88.8f, -100.0f, 100.0f, -1e4f})
    g.push_back(v), u.push_back(1.5f);
  std::vector<float> ref = g;
  ref::silu_mul(ref.data(), u.data(), 1, int64_t(g.size()));
  for (size_t i = 0; i < g.size(); ++i) {
    const float got = m::silu_mul_with(g[i], u[i], std::exp(-g[i]));  // glibc expf: within 1 ulp
    ASSERT_LE(std::fabs(double(got) - double(ref[i])),
              m::silu_rel_bound() * std::fabs(double(ref[i])) + m::kSiluAbsSlack * (1.0 + std::fabs(double(u[i]))))
        << "g " << g[i] << " u " << u[i] << ": " << got << " vs " << ref[i];
  }
}

// ops_kernels.cu hadamard_kernel's steps on the host (each stage's butterflies are disjoint, so
// doing them one after another is what the block's threads do between two barriers), bit for bit
// ref::hadamard_rows; random ±1 bases, signs and a −0 input.
TEST(CudaOpsMath, HadamardInTheDeviceStepsIsTheReferenceBitForBit) {
  std::mt19937_64 rng(17);
  std::normal_distribution<float> d(0.0f, 3.0f);
  const auto signs = [&](size_t n) {
    std::vector<float> v(n);
    for (float& s : v) s = (rng() & 1) ? 1.0f : -1.0f;
    return v;
  };
  for (const auto& [pow2, mm] : std::vector<std::pair<int64_t, int>>{{64, 1}, {1, 5}, {512, 3}, {256, 35}, {32, 7}}) {
    for (const bool with_signs : {false, true}) {
      const int64_t n = pow2 * mm, rows = 2;
      const std::vector<float> base = signs(size_t(mm) * size_t(mm)), pre = signs(size_t(n)), post = signs(size_t(n));
      std::vector<float> x(size_t(rows * n));
      for (float& v : x) v = d(rng);
      x[1] = -0.0f;
      const float scale = 1.0f / std::sqrt(float(n));
      const float* pr = with_signs ? pre.data() : nullptr;
      const float* po = with_signs ? post.data() : nullptr;
      std::vector<float> want = x;
      ref::hadamard_rows(want.data(), rows, pow2, mm, base.data(), scale, pr, po);
      std::vector<float> buf(static_cast<size_t>(n));
      for (int64_t row = 0; row < rows; ++row) {
        float* xr = x.data() + row * n;
        for (int64_t k = 0; k < n; ++k)
          buf[size_t(k)] = mm == 1 ? (pr ? m::mul_rn(xr[k], pr[k]) : xr[k]) : m::hadamard_mstep(xr, pr, base.data(), mm, k);
        for (int64_t h = 1; h < pow2; h *= 2)
          for (int64_t p = 0; p < n / 2; ++p) m::butterfly(buf.data(), p, h * mm);
        for (int64_t k = 0; k < n; ++k) xr[k] = m::hadamard_out(buf[size_t(k)], scale, po, k);
      }
      for (size_t i = 0; i < x.size(); ++i)
        ASSERT_EQ(bits_of(x[i]), bits_of(want[i])) << "pow2 " << pow2 << " m " << mm << " i " << i;
    }
  }
}

}  // namespace
}  // namespace sinkq::cuda
