// tests/lowbit/gemm_test.cc — the integer GEMM / GEMV: every ISA bit-identical to ref::gemm,
// ref::gemm against the exact product of the codes, and the real kernels against the simulator
// (fake-quantized X and W through the fp32 matmul), on awkward shapes.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "formats/quantizer.h"
#include "kernels/kernel_test_util.h"
#include "kernels/ops.h"
#include "lowbit/formats.h"
#include "lowbit/kernels.h"
#include "util/testutil.h"

namespace sinkq::lowbit {
namespace {

using testing::bit_equal;
using ::testing::HasSubstr;
using ktest::gamma;
using sinkq::testing::error_of;

const PackedFormat kWeights[] = {PackedFormat::W8_PerRow,   PackedFormat::W4_PerRow,    PackedFormat::W4_G32,
                                 PackedFormat::W4_G64,      PackedFormat::W4_G128,      PackedFormat::W4_G32_Asym,
                                 PackedFormat::W4_G64_Asym, PackedFormat::W4_G128_Asym};
const PackedFormat kActs[] = {PackedFormat::A8_PerToken, PackedFormat::A8_PerTensor, PackedFormat::A4_PerToken,
                              PackedFormat::A4_PerTensor};
const int64_t kTs[] = {1, 2, 7, 65};

// In-features per weight format: per-row K need not be a multiple of anything (1, 3, 100, 257:
// partial last steps); per-group K is a multiple of the group (1, 3 and 5 groups).
std::vector<int64_t> ks_for(PackedFormat w) {
  const int g = traits(w).group;
  if (g > 0) return {g, 3 * int64_t(g), 5 * int64_t(g)};
  return {1, 3, 100, 257};
}
const int64_t kOuts[] = {1, 17, 67};  // partial 16-row blocks, odd

std::vector<float> outlier_data(std::mt19937_64& rng, int64_t rows, int64_t cols, float outlier) {
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(size_t(rows * cols));
  for (float& x : v) x = d(rng);
  std::uniform_int_distribution<int64_t> col(0, cols - 1);
  for (int64_t i = 0; i < rows; ++i) v[size_t(i * cols + col(rng))] *= outlier;
  return v;
}

// Activations in format f: dynamic per token, or per tensor calibrated on x itself at clip 0.9
// (so some codes clamp to -2^(N-1)).
PackedTensor acts(PackedFormat f, const std::vector<float>& x, int64_t T, int64_t K) {
  PackedTensor out;
  if (traits(f).granularity == quant::Granularity::PerTensor) {
    const quant::Params p = quant::compute_params(quant_spec(f, 0.9f), x.data(), T, K);
    quantize_static(f, x.data(), T, K, p, out);
  } else {
    quantize_dynamic(f, x.data(), T, K, 1.0f, out);
  }
  return out;
}

struct Case {
  PackedTensor x, w;
  KernelWeights kw;
  std::vector<float> bias;
  bool with_bias;
  std::string what;
};

Case make_case(std::mt19937_64& rng, PackedFormat wf, PackedFormat xf, int64_t T, int64_t N, int64_t K) {
  Case c;
  const std::vector<float> x = outlier_data(rng, T, K, 30.0f);
  const std::vector<float> w = outlier_data(rng, N, K, 4.0f);
  c.x = acts(xf, x, T, K);
  c.w = quantize(wf, w.data(), N, K, (N + K) % 2 ? 1.0f : 0.85f);
  c.kw = repack(c.w);
  c.bias = ktest::random_vec(rng, size_t(N));
  c.with_bias = (T + N) % 2 == 1;
  c.what = std::string(traits(wf).name) + " x " + std::string(traits(xf).name) + " T=" + std::to_string(T) +
           " N=" + std::to_string(N) + " K=" + std::to_string(K);
  return c;
}

// Every ISA (and the scalar table) equals ref::gemm bit for bit: the integer sums are exact and
// the fp32 dequantization is the same sequence of roundings everywhere.
TEST(LowbitGemm, EveryIsaBitIdenticalToRef) {
  ktest::StateGuard guard;
  std::mt19937_64 rng(21);
  int cases = 0;
  for (PackedFormat wf : kWeights)
    for (PackedFormat xf : kActs)
      for (int64_t K : ks_for(wf))
        for (int64_t N : kOuts)
          for (int64_t T : kTs) {
            const Case c = make_case(rng, wf, xf, T, N, K);
            const float* bias = c.with_bias ? c.bias.data() : nullptr;
            std::vector<float> want(size_t(T * N));
            ref::gemm(c.x, c.w, bias, want.data());
            for (Isa isa : ktest::all_isas()) {
              set_isa(isa);
              std::vector<float> got(want.size(), NAN);
              gemm(c.x, c.kw, bias, got.data());
              EXPECT_TRUE(bit_equal(got, want)) << ktest::ctx(isa, c.what);
            }
            ++cases;
          }
  EXPECT_GT(cases, 1000);
}

// ref::gemm against the exact result E = Σ x̂ ŵ (+ b) in double: the integer sums are exact, so
// only the dequantization roundings remain: |y - E| <= γ_{G+3}·(Σ|x̂ŵ| + |b|), G groups per row.
// Real vs simulated (fake-quant X and W = dequantize of the packed tensors, then the fp32
// matmul): |y - y_sim| <= (γ_{K+1} + γ_{G+3})·(Σ|x̂ŵ| + |b|).
TEST(LowbitGemm, RealMatchesSimulatedAndExact) {
  ktest::StateGuard guard;
  std::mt19937_64 rng(22);
  for (PackedFormat wf : kWeights)
    for (PackedFormat xf : {PackedFormat::A8_PerToken, PackedFormat::A4_PerTensor})
      for (int64_t K : ks_for(wf))
        for (int64_t T : kTs) {
          const int64_t N = 33;
          const Case c = make_case(rng, wf, xf, T, N, K);
          const float* bias = c.with_bias ? c.bias.data() : nullptr;
          std::vector<float> xh(size_t(T * K)), wh(size_t(N * K)), y(size_t(T * N)), ysim(y.size());
          dequantize(c.x, xh.data());
          dequantize(c.w, wh.data());
          gemm(c.x, c.kw, bias, y.data());
          matmul(xh.data(), T, Mat{DType::F32, N, K, wh.data(), "sim"}, bias, ysim.data());
          const double G = double(c.w.groups());
          double worst_exact = 0.0, worst_sim = 0.0;
          for (int64_t t = 0; t < T; ++t)
            for (int64_t r = 0; r < N; ++r) {
              double e = bias ? bias[r] : 0.0, s = bias ? std::fabs(bias[r]) : 0.0;
              for (int64_t k = 0; k < K; ++k) {
                const double p = double(xh[size_t(t * K + k)]) * wh[size_t(r * K + k)];
                e += p;
                s += std::fabs(p);
              }
              const size_t i = size_t(t * N + r);
              worst_exact = std::max(worst_exact, std::fabs(y[i] - e) / (gamma(G + 3) * s + 1e-30));
              worst_sim = std::max(worst_sim, std::fabs(double(y[i]) - ysim[i]) /
                                                  ((gamma(double(K) + 1) + gamma(G + 3)) * s + 1e-30));
            }
          EXPECT_LE(worst_exact, 1.0) << c.what;
          EXPECT_LE(worst_sim, 1.0) << c.what;
        }
}

// Large enough to run threaded (T = 65 with A4 also the per-token prologue): 1 and 2 threads
// give the same bits (each output is computed by one thread, in a fixed order).
TEST(LowbitGemm, ThreadCountDoesNotMatter) {
  ktest::StateGuard guard;
  std::mt19937_64 rng(23);
  for (PackedFormat wf : {PackedFormat::W8_PerRow, PackedFormat::W4_G128_Asym})
    for (auto [T, xf] : {std::pair{int64_t(1), PackedFormat::A8_PerToken}, {int64_t(7), PackedFormat::A8_PerTensor},
                         {int64_t(65), PackedFormat::A4_PerToken}}) {
      const Case c = make_case(rng, wf, xf, T, 1000, 1024);
      std::vector<float> want(size_t(T * 1000));
      ref::gemm(c.x, c.w, c.bias.data(), want.data());
      for (Isa isa : ktest::all_isas()) {
        set_isa(isa);
        for (int threads : {1, 2}) {
          set_num_threads(threads);
          std::vector<float> got(want.size(), NAN);
          gemm(c.x, c.kw, c.bias.data(), got.data());
          EXPECT_TRUE(bit_equal(got, want)) << ktest::ctx(isa, c.what) << " threads " << threads;
        }
      }
    }
}

// gemm_multi (one activation prologue, one dispatch over the row blocks of several matrices: a
// site's q/k/v or gate/up) gives each matrix exactly ref::gemm's result, on every ISA and at 1 and
// 2 threads (a work item never spans two matrices; 1000 rows make the 2-thread split real).
TEST(LowbitGemm, MultiEqualsRefPerMatrix) {
  ktest::StateGuard guard;
  std::mt19937_64 rng(29);
  for (PackedFormat wf : kWeights)
    for (auto [T, xf] : {std::pair{int64_t(1), PackedFormat::A8_PerToken}, {int64_t(7), PackedFormat::A4_PerTensor},
                         {int64_t(65), PackedFormat::A8_PerTensor}}) {
      const int64_t K = ks_for(wf)[1];
      const int64_t Ns[] = {67, 1000, 17};
      std::vector<Case> cs;
      for (int64_t N : Ns) cs.push_back(make_case(rng, wf, xf, T, N, K));
      for (Case& c : cs) c.x = cs[0].x;  // one activation for all
      std::vector<std::vector<float>> want;
      for (const Case& c : cs) {
        want.emplace_back(size_t(T * c.w.rows));
        ref::gemm(c.x, c.w, c.with_bias ? c.bias.data() : nullptr, want.back().data());
      }
      for (Isa isa : ktest::all_isas()) {
        set_isa(isa);
        for (int threads : {1, 2}) {
          set_num_threads(threads);
          std::vector<std::vector<float>> got;
          std::vector<GemmOut> outs;
          for (const Case& c : cs) got.emplace_back(size_t(T * c.w.rows), NAN);
          for (size_t m = 0; m < cs.size(); ++m)
            outs.push_back({&cs[m].kw, cs[m].with_bias ? cs[m].bias.data() : nullptr, got[m].data()});
          gemm_multi(cs[0].x, outs);
          for (size_t m = 0; m < cs.size(); ++m)
            EXPECT_TRUE(bit_equal(got[m], want[m])) << ktest::ctx(isa, cs[m].what) << " threads " << threads;
        }
      }
    }
  // One format per call, at most 8 matrices, at least one.
  const Case a = make_case(rng, PackedFormat::W8_PerRow, PackedFormat::A8_PerToken, 2, 17, 64);
  const Case b = make_case(rng, PackedFormat::W4_G32, PackedFormat::A8_PerToken, 2, 17, 64);
  std::vector<float> y1(34), y2(34);
  const GemmOut mixed[] = {{&a.kw, nullptr, y1.data()}, {&b.kw, nullptr, y2.data()}};
  EXPECT_THAT(error_of([&] { gemm_multi(a.x, mixed); }), HasSubstr("one call takes weights of one format"));
  std::vector<GemmOut> nine(9, GemmOut{&a.kw, nullptr, y1.data()});
  EXPECT_THAT(error_of([&] { gemm_multi(a.x, nine); }), HasSubstr("at most 8 weight matrices"));
  EXPECT_THAT(error_of([&] { gemm_multi(a.x, std::span<const GemmOut>()); }), HasSubstr("no weight matrices"));
}

// The int32 accumulation at its limit K = kMaxCols with the extreme codes: 8-bit weights stored
// as u = c + 128 = 255 against activation -128 (the VNNI sum Σ u·c_x = -2^31 + 2^23), and
// -128 x -128 (Σ c_x c_w = 2^30; on AVX2 the offset kernel: > 1 code -128 per step); and
// AVX2's signed kernel at its extremes: -127 x -128 (pairs 2·127·128) and a row with a -128 in
// every step (as many corrections as it takes), against -128 and 127. Scales 1: y is the integer itself (exact in fp32).
TEST(LowbitGemm, ExtremeCodesAtMaxCols) {
  ktest::StateGuard guard;
  const int64_t K = kMaxCols, T = 2, N = 3;
  auto per_row = [&](int bits, int64_t rows, quant::Granularity g) {
    quant::Params p;
    p.granularity = g;
    p.bits = bits;
    p.symmetric = true;
    p.prow = rows;
    p.pcol = 1;
    p.col_block = K;
    p.scale.assign(size_t(rows), 1.0f);
    return p;
  };
  std::vector<int8_t> cx(size_t(T * K), -128), cw(size_t(N * K));
  for (int64_t k = 0; k < K; ++k) {
    cw[size_t(k)] = 127;
    cw[size_t(K + k)] = -128;
    cw[size_t(2 * K + k)] = int8_t(k % 2 ? 127 : -128);
  }
  std::fill(cx.begin() + K, cx.end(), int8_t(127));
  const PackedTensor x = pack(PackedFormat::A8_PerToken, cx.data(), per_row(8, T, quant::Granularity::PerRow), T, K);
  const PackedTensor w = pack(PackedFormat::W8_PerRow, cw.data(), per_row(8, N, quant::Granularity::PerRow), N, K);
  const KernelWeights kw = repack(w);
  const float want[] = {-127.0f * 128 * K, 128.0f * 128 * K, 128.0f * K / 2,
                        127.0f * 127 * K,  -128.0f * 127 * K, -127.0f * K / 2};
  // The signed kernel: rows 127; -127 with -128 in column 4s of each step s; 127 / -127.
  std::vector<int8_t> cs(size_t(N * K));
  for (int64_t k = 0; k < K; ++k) {
    cs[size_t(k)] = 127;
    cs[size_t(K + k)] = int8_t(k % 4 ? -127 : -128);
    cs[size_t(2 * K + k)] = int8_t(k % 2 ? 127 : -127);
  }
  const PackedTensor ws = pack(PackedFormat::W8_PerRow, cs.data(), per_row(8, N, quant::Granularity::PerRow), N, K);
  const KernelWeights kws = repack(ws);
  ASSERT_EQ(kws.neg128.size(), size_t(K / 4));  // one per step: the signed kernel's limit on AVX2
  const double q = K / 4.0;                      // sums below: multiples of 64 under 2^30, exact in fp32
  const float want_s[] = {-127.0f * 128 * K, float(3 * q * 127 * 128 + q * 128 * 128), 0.0f,
                          127.0f * 127 * K,  float(-3 * q * 127 * 127 - q * 128 * 127), 0.0f};
  for (Isa isa : ktest::all_isas()) {
    set_isa(isa);
    std::vector<float> y(size_t(T * N), NAN), ys(size_t(T * N), NAN);
    gemm(x, kw, nullptr, y.data());
    gemm(x, kws, nullptr, ys.data());
    for (int i = 0; i < 6; ++i) {
      EXPECT_EQ(y[size_t(i)], want[i]) << ktest::ctx(isa, "output " + std::to_string(i));
      EXPECT_EQ(ys[size_t(i)], want_s[i]) << ktest::ctx(isa, "signed-path output " + std::to_string(i));
    }
  }
}

// 8-bit weights with codes -128: repack lists exactly those (KernelWeights::neg128, block by
// block); on AVX2 the blocks with a few take the signed kernel, where vpsignb wraps on them and
// each is corrected, the block with many (> 1 per step) the offset kernel, in one call. The -128s
// meet activation codes -128 and -100 (wrapped) and positive ones; a row of -127 meets a token of
// -128s (pairs of 2·127·128, one step from saturation). Every ISA equals ref::gemm.
TEST(LowbitGemm, EightBitMinus128CodesAreListedAndCorrected) {
  ktest::StateGuard guard;
  std::mt19937_64 rng(25);
  const int64_t N = 80, K = 257;  // 5 blocks; a partial last step
  std::uniform_int_distribution<int> wcode(-127, 127), xcode(-128, 127);
  std::uniform_real_distribution<float> scale(0.01f, 2.0f);
  std::vector<int8_t> cw(size_t(N * K));
  for (int8_t& c : cw) c = int8_t(wcode(rng));
  for (int64_t k = 0; k < K; ++k) cw[size_t(2 * K + k)] = -127;  // block 0 (clean): the extreme row
  quant::Params pw;
  pw.granularity = quant::Granularity::PerRow;
  pw.bits = 8;
  pw.symmetric = true;
  pw.prow = N;
  pw.pcol = 1;
  pw.col_block = K;
  for (int64_t r = 0; r < N; ++r) pw.scale.push_back(scale(rng));
  const KernelWeights none = repack(pack(PackedFormat::W8_PerRow, cw.data(), pw, N, K));
  EXPECT_TRUE(none.neg128_start.empty() && none.neg128.empty());
  cw[size_t((16 + 3) * K + 200)] = -128;                         // block 1: an inner column
  cw[size_t((16 + 3) * K + 7)] = -128;                           // block 1: same row, x > 0
  cw[size_t((16 + 9) * K + 200)] = -128;                         // block 1: another row
  for (int64_t k = 0; k < 100; ++k) cw[size_t((32 + 8) * K + k)] = -128;  // block 2: 100 > 65 steps
  cw[size_t((48 + 15) * K + 256)] = -128;                        // block 3: its last row, the tail column
  const PackedTensor w = pack(PackedFormat::W8_PerRow, cw.data(), pw, N, K);
  const KernelWeights kw = repack(w);
  ASSERT_EQ(kw.neg128_start, (std::vector<uint32_t>{0, 0, 3, 103, 104, 104}));
  EXPECT_EQ(std::vector<uint32_t>(kw.neg128.begin(), kw.neg128.begin() + 3),
            (std::vector<uint32_t>{7 << 4 | 3, 200 << 4 | 3, 200 << 4 | 9}));
  EXPECT_EQ(kw.neg128[3], 0u << 4 | 8);
  EXPECT_EQ(kw.neg128[102], 99u << 4 | 8);
  EXPECT_EQ(kw.neg128[103], 256u << 4 | 15);
  for (int64_t T : {1, 5, 65}) {
    std::vector<int8_t> cx(size_t(T * K));
    for (int8_t& c : cx) c = int8_t(xcode(rng));
    for (int64_t t = 0; t < T; ++t) {
      cx[size_t(t * K + 200)] = -128;
      cx[size_t(t * K + 256)] = -100;
      cx[size_t(t * K + 7)] = 90;
    }
    std::fill(cx.begin(), cx.begin() + K, int8_t(-128));  // token 0
    quant::Params px = pw;
    px.prow = T;
    px.scale.clear();
    for (int64_t t = 0; t < T; ++t) px.scale.push_back(scale(rng));
    const PackedTensor x = pack(PackedFormat::A8_PerToken, cx.data(), px, T, K);
    std::vector<float> want(size_t(T * N));
    ref::gemm(x, w, nullptr, want.data());
    for (Isa isa : ktest::all_isas()) {
      set_isa(isa);
      std::vector<float> got(want.size(), NAN);
      gemm(x, kw, nullptr, got.data());
      EXPECT_TRUE(bit_equal(got, want)) << ktest::ctx(isa, "T=" + std::to_string(T));
    }
  }
}

TEST(LowbitGemm, IsaNames) {
  ktest::StateGuard guard;
  set_isa(Isa::Scalar);
  EXPECT_EQ(kernel_isa_name(), "scalar");
  if (detected_isa() >= Isa::Avx2) {
    set_isa(Isa::Avx2);
    EXPECT_EQ(kernel_isa_name(), "avx2");
  }
  if (detected_isa() == Isa::Avx512) {
    set_isa(Isa::Avx512);
    EXPECT_EQ(kernel_isa_name(), __builtin_cpu_supports("avx512vnni") ? "avx512-vnni" : "avx2");
  }
}

TEST(LowbitGemm, Errors) {
  std::mt19937_64 rng(24);
  const Case c = make_case(rng, PackedFormat::W4_G32, PackedFormat::A8_PerToken, 2, 5, 64);
  std::vector<float> y(10);
  EXPECT_THAT(error_of([&] { repack(c.x); }), HasSubstr("a8_per_token is an activation format"));
  EXPECT_THAT(error_of([&] { gemm(c.w, c.kw, nullptr, y.data()); }), HasSubstr("w4_g32 is a weight format"));
  const Case d = make_case(rng, PackedFormat::W8_PerRow, PackedFormat::A8_PerToken, 2, 5, 63);
  EXPECT_THAT(error_of([&] { gemm(d.x, c.kw, nullptr, y.data()); }),
              HasSubstr("activations have 63 features, w4_g32 weights [5, 64] expect 64"));
  KernelWeights broken = c.kw;
  broken.codes.resize(64);
  EXPECT_THAT(error_of([&] { gemm(c.x, broken, nullptr, y.data()); }), HasSubstr("not in the repack() layout"));
  for (uint32_t entry : {uint32_t(63 << 4), uint32_t(5 << 4 | 5)}) {  // column 63 of 63; row 5 of 5
    KernelWeights bad8 = d.kw;
    bad8.neg128.push_back(entry);
    bad8.neg128_start.back() += 1;
    EXPECT_THAT(error_of([&] { gemm(d.x, bad8, nullptr, y.data()); }), HasSubstr("not in the repack() layout"));
  }
  PackedTensor xs = c.x;
  xs.scales.pop_back();
  EXPECT_THAT(error_of([&] { gemm(xs, c.kw, nullptr, y.data()); }), HasSubstr("do not fit the format"));
  std::vector<float> wide(size_t(kMaxCols + 1), 1.0f);
  const PackedTensor big = quantize(PackedFormat::W8_PerRow, wide.data(), 1, kMaxCols + 1);
  EXPECT_THAT(error_of([&] { repack(big); }), HasSubstr("cols <= 65536"));
}

}  // namespace
}  // namespace sinkq::lowbit
