// tests/kernels/norm_rope_test.cc — rmsnorm, RoPE (tables and rotation), embed_rows, silu_mul.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numbers>
#include <random>
#include <vector>

#include "core/error.h"
#include "kernels/ops.h"
#include "kernel_test_util.h"

namespace sinkq {
namespace {

using ktest::gamma;
using ktest::kU;

// Bound: sum of squares of n positive terms errs by <= gamma_n relative; /n, +eps, sqrt (halves
// the relative error), 1/x, x*r, *w add <= 5u: |fast - exact| <= (gamma_n + 6u) |exact| (+u for
// ref's own rounding; gamma_n not halved, for slack).
TEST(RmsNorm, FastMatchesRef) {
  ktest::StateGuard guard;
  std::mt19937_64 rng(1);
  for (Isa isa : ktest::all_isas()) {
    set_isa(isa);
    for (int64_t T : {1, 3, 7, 130})  // 130 x 2051: parallel over rows
      for (int64_t n : {1, 5, 17, 100, 1000, 2051}) {
        const std::vector<float> x = ktest::random_vec(rng, size_t(T * n), -3.0f, 3.0f);
        const std::vector<float> w = ktest::random_vec(rng, size_t(n), 0.5f, 1.5f);
        std::vector<float> y(x.size()), yr(x.size()), yin = x;
        rmsnorm(x.data(), w.data(), y.data(), T, n, 1e-5f);
        rmsnorm(yin.data(), w.data(), yin.data(), T, n, 1e-5f);  // in place
        ref::rmsnorm(x.data(), w.data(), yr.data(), T, n, 1e-5f);
        for (size_t i = 0; i < y.size(); ++i) {
          ASSERT_LE(std::fabs(double(y[i]) - yr[i]), (gamma(double(n)) + 7 * kU) * std::fabs(yr[i]) + 1e-37)
              << ktest::ctx(isa, "rmsnorm") << " T=" << T << " n=" << n << " i=" << i;
          ASSERT_EQ(y[i], yin[i]) << "in-place differs";
        }
      }
  }
}

// With a constant weight c, rms(y) = |c| sqrt(var / (var + eps)) exactly; the fp32 result is
// within the per-element bound above (relative), so rms within the same relative bound.
TEST(RmsNorm, OutputRmsIsWeight) {
  ktest::StateGuard guard;
  std::mt19937_64 rng(2);
  for (Isa isa : ktest::all_isas()) {
    set_isa(isa);
    const int64_t n = 2049;
    const float eps = 1e-6f, c = -2.5f;
    const std::vector<float> x = ktest::random_vec(rng, size_t(n), -1.0f, 1.0f);
    const std::vector<float> w(static_cast<size_t>(n), c);
    std::vector<float> y(static_cast<size_t>(n));
    rmsnorm(x.data(), w.data(), y.data(), 1, n, eps);
    double var = 0, ms = 0;
    for (int64_t i = 0; i < n; ++i) var += double(x[i]) * x[i] / n, ms += double(y[i]) * y[i] / n;
    const double want = std::fabs(c) * std::sqrt(var / (var + eps));
    EXPECT_NEAR(std::sqrt(ms), want, (gamma(double(n)) + 8 * kU) * want) << isa_name(isa);
  }
}

ModelConfig rope_cfg(int head_dim, float theta, RopeScaling sc = {}) {
  ModelConfig c;
  c.hidden_size = head_dim * 4;
  c.num_heads = 4;
  c.head_dim = head_dim;
  c.rope_theta = theta;
  c.rope_scaling = sc;
  return c;
}

// HF computes inv_freq in fp32: expo = fl(2i/d) (rel. error u), then powf (<= 1 ulp with
// glibc), then 1/x (u). An exponent error of u relative changes theta^e by a factor
// theta^(e u) ~ 1 + e u ln(theta): so |fp32 - exact| <= (ln(theta) + 3) u relative.
TEST(Rope, InvFreqDefaultMatchesDoubleFormula) {
  for (int d : {2, 64, 80, 128})
    for (float theta : {10000.0f, 500000.0f, 1e6f}) {
      const RopeTable rt = RopeTable::make(rope_cfg(d, theta).rope());
      ASSERT_EQ(int(rt.inv_freq.size()), d / 2);
      EXPECT_EQ(rt.inv_freq[0], 1.0f);
      for (int i = 0; i < d / 2; ++i) {
        const double want = 1.0 / std::pow(double(theta), 2.0 * i / d);
        EXPECT_NEAR(rt.inv_freq[i], want, (std::log(double(theta)) + 3) * kU * want) << d << " " << i;
      }
    }
}

// HF _compute_llama3_parameters in double precision.
double llama3_double(double inv, const RopeScaling& s) {
  const double wavelen = 2 * std::numbers::pi / inv;
  const double low_wl = s.original_max_position_embeddings / double(s.low_freq_factor);
  const double high_wl = s.original_max_position_embeddings / double(s.high_freq_factor);
  if (wavelen < high_wl) return inv;
  if (wavelen > low_wl) return inv / s.factor;
  const double smooth = (s.original_max_position_embeddings / wavelen - s.low_freq_factor) /
                        (double(s.high_freq_factor) - s.low_freq_factor);
  return (1 - smooth) * inv / s.factor + smooth * inv;
}

// Bound: base inv_freq relative error e0 = (ln theta + 3) u (above); wavelen and old/wavelen add
// 2u. In the smooth band s = (old/wavelen - low)/(high - low) has absolute error
// <= (high (e0 + 3u) + 2u (high - low)) / (high - low), and d result / ds = inv (1 - 1/f) with
// result >= inv / f, so the relative error is <= e0 + 4u + (f - 1) * that. Outside the band the
// result is inv or inv/f: e0 + u. (The blend is continuous at both edges, so a comparison that
// rounds to the other branch stays within the same bound.)
TEST(Rope, Llama3InvFreqMatchesDoubleFormula) {
  RopeScaling sc;
  sc.type = "llama3";
  sc.factor = 8.0f;
  sc.low_freq_factor = 1.0f;
  sc.high_freq_factor = 4.0f;
  sc.original_max_position_embeddings = 8192;
  for (int d : {64, 128}) {
    const float theta = 500000.0f;
    const RopeTable rt = RopeTable::make(rope_cfg(d, theta, sc).rope());
    const double e0 = (std::log(double(theta)) + 3) * kU;
    const double band = sc.high_freq_factor - sc.low_freq_factor;
    const double tol = e0 + 4 * kU + (sc.factor - 1) * (sc.high_freq_factor * (e0 + 3 * kU) + 2 * kU * band) / band;
    int kept = 0, divided = 0, blended = 0;
    for (int i = 0; i < d / 2; ++i) {
      const double inv = 1.0 / std::pow(double(theta), 2.0 * i / d);
      const double want = llama3_double(inv, sc);
      EXPECT_NEAR(rt.inv_freq[i], want, tol * want) << "d=" << d << " i=" << i;
      kept += want == inv;
      divided += want == inv / sc.factor;
    }
    blended = d / 2 - kept - divided;
    EXPECT_GT(kept, 0);  // the test covers all three branches
    EXPECT_GT(divided, 0);
    EXPECT_GT(blended, 0);
  }
}

TEST(Rope, LinearDividesFrequencies) {
  RopeScaling sc;
  sc.type = "linear";
  sc.factor = 4.0f;
  const RopeTable plain = RopeTable::make(rope_cfg(64, 10000.0f).rope());
  const RopeTable lin = RopeTable::make(rope_cfg(64, 10000.0f, sc).rope());
  for (int i = 0; i < 32; ++i) EXPECT_EQ(lin.inv_freq[i], plain.inv_freq[i] / 4.0f);
  sc.type = "yarn";
  EXPECT_THROW(RopeTable::make(rope_cfg(64, 10000.0f, sc).rope()), Error);
  EXPECT_THROW(RopeTable::make(rope_cfg(63, 10000.0f).rope()), Error);  // odd head_dim
}

// Fast and ref share the fp32 angle and fp32 cos/sin; the fast rotation rounds two products and
// a sum (<= 2u (|x1 c| + |x2 s|)), ref rounds once (u): tolerance 3u (|x1| + |x2|) per output.
TEST(Rope, FastMatchesRef) {
  ktest::StateGuard guard;
  std::mt19937_64 rng(5);
  for (Isa isa : ktest::all_isas()) {
    set_isa(isa);
    for (int d : {2, 6, 64, 80, 128})
      for (int64_t T : {1, 3, 7, 64}) {
        const int H = 3;
        const RopeTable rt = RopeTable::make(rope_cfg(d, 500000.0f).rope());
        std::vector<int32_t> pos(static_cast<size_t>(T));
        for (int64_t t = 0; t < T; ++t) pos[t] = int32_t(rng() % 131072);
        const std::vector<float> x = ktest::random_vec(rng, size_t(T * H * d), -4.0f, 4.0f);
        std::vector<float> y = x, yr = x;
        rope_apply(rt, y.data(), T, H, pos);
        ref::rope_apply(rt, yr.data(), T, H, pos);
        for (int64_t v = 0; v < T * H; ++v)
          for (int i = 0; i < d / 2; ++i) {
            const size_t a = v * d + i, b = a + d / 2;
            const double tol = 3 * kU * (std::fabs(x[a]) + std::fabs(x[b])) + 1e-37;
            ASSERT_LE(std::fabs(double(y[a]) - yr[a]), tol) << ktest::ctx(isa, "rope") << " d=" << d;
            ASSERT_LE(std::fabs(double(y[b]) - yr[b]), tol) << ktest::ctx(isa, "rope") << " d=" << d;
          }
      }
  }
}

// Rotation: fp32 cos/sin satisfy c^2 + s^2 = 1 +- 2u, the rotation's roundings add <= 2u relative
// per pair (times sqrt 2 for the norm): ||x'|| = ||x|| within 6u relative. Position 0 is exact.
TEST(Rope, IsARotation) {
  std::mt19937_64 rng(6);
  const int d = 128, H = 2;
  const int64_t T = 50;
  const RopeTable rt = RopeTable::make(rope_cfg(d, 10000.0f).rope());
  std::vector<int32_t> pos(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) pos[t] = t == 0 ? 0 : int32_t(rng() % 100000);
  const std::vector<float> x = ktest::random_vec(rng, size_t(T * H * d));
  std::vector<float> y = x;
  rope_apply(rt, y.data(), T, H, pos);
  for (int64_t v = 0; v < T * H; ++v) {
    double n0 = 0, n1 = 0;
    for (int i = 0; i < d; ++i) n0 += double(x[v * d + i]) * x[v * d + i], n1 += double(y[v * d + i]) * y[v * d + i];
    EXPECT_NEAR(std::sqrt(n1), std::sqrt(n0), 6 * kU * std::sqrt(n0)) << v;
  }
  for (int i = 0; i < H * d; ++i) EXPECT_EQ(y[i], x[i]);  // token 0 sits at position 0
}

TEST(EmbedRows, GathersAndWidensExactly) {
  ktest::StateGuard guard;
  std::mt19937_64 rng(8);
  for (Isa isa : ktest::all_isas()) {
    set_isa(isa);
    for (DType dt : {DType::F32, DType::BF16, DType::F16}) {
      const ktest::TestMat E = ktest::random_mat(rng, dt, 50, 37);
      const std::vector<int32_t> ids = {0, 49, 7, 7, 23};
      std::vector<float> out(ids.size() * 37);
      embed_rows(E.mat(), ids, out.data());
      for (size_t i = 0; i < ids.size(); ++i)
        for (int k = 0; k < 37; ++k) ASSERT_EQ(out[i * 37 + k], E.widened[ids[i] * 37 + k]) << isa_name(isa);
    }
  }
}

TEST(EmbedRows, OutOfRangeIdIsAnError) {
  std::mt19937_64 rng(9);
  const ktest::TestMat E = ktest::random_mat(rng, DType::BF16, 50, 8);
  std::vector<float> out(16);
  for (int32_t bad : {-1, 50, 1 << 30}) {
    const std::vector<int32_t> ids = {3, bad};
    try {
      embed_rows(E.mat(), ids, out.data());
      FAIL() << "no error for id " << bad;
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(std::to_string(bad)), std::string::npos) << msg;
      EXPECT_NE(msg.find("50"), std::string::npos) << msg;
    }
  }
}

// silu(g) u = g / (1 + exp(-g)) u: exp <= 4u relative, 1 + e adds u and keeps e's relative error
// at most, then /, * add 2u: <= 7u relative, plus ref's rounding: 8u |ref|.
TEST(SiluMul, FastMatchesRef) {
  ktest::StateGuard guard;
  std::mt19937_64 rng(10);
  for (Isa isa : ktest::all_isas()) {
    set_isa(isa);
    for (int64_t T : {1, 3, 64})
      for (int64_t n : {1, 7, 31, 1000, 5633}) {
        std::vector<float> g = ktest::random_vec(rng, size_t(T * n), -20.0f, 20.0f);
        const std::vector<float> u = ktest::random_vec(rng, size_t(T * n), -2.0f, 2.0f);
        std::vector<float> gr = g;
        silu_mul(g.data(), u.data(), T, n);
        ref::silu_mul(gr.data(), u.data(), T, n);
        for (size_t i = 0; i < g.size(); ++i)
          ASSERT_LE(std::fabs(double(g[i]) - gr[i]), (ktest::kExpRel + 4 * kU) * std::fabs(gr[i]) + 1e-30)
              << ktest::ctx(isa, "silu") << " T=" << T << " n=" << n << " i=" << i;
      }
  }
}

}  // namespace
}  // namespace sinkq
