// tests/cuda/linear_math_test.cc — the device linear's arithmetic, replayed on the host (no GPU):
// the kernels' decomposition (cuda/linear_kernels.cu: a thread's 16-byte share of a step, passes
// of 32 steps, warp / group reductions, the group folds in order; and the tensor-core path's
// weights widened to int8 levels, exact integer dots, folds at each group's end) written with the functions of
// cuda/linear_math.h that the kernels call, held to lowbit::ref::gemm bit for bit on every weight
// format × A8 / A4 activations (A4 one code per byte, as the device holds them), awkward shapes,
// clipped codes and a bias. The same bits on the device are the device
// test's (tests/cuda/device/linear_device_test.cc); this one runs in CI everywhere, so a change to
// the shared arithmetic or to the layout it reads fails here first.
#include <gtest/gtest.h>

#include <cfloat>
#include <cstring>
#include <random>
#include <vector>

#include "cuda/linear_math.h"
#include "formats/uniform_int.h"
#include "lowbit/formats.h"
#include "lowbit/kernels.h"

namespace sinkq::cuda {
namespace {

using lowbit::KernelWeights;
using lowbit::PackedFormat;
using lowbit::PackedTensor;
namespace m = math;

// The activation side as the quantize kernel writes it: codes padded to 64 columns, per-token
// scales s = guard((clip · absmax) / 127) (one rounding each), 32-column code sums.
struct Acts {
  std::vector<int8_t> codes;
  std::vector<float> scales;
  std::vector<int32_t> sums;
  int64_t T = 0, ldc = 0, nsum = 0;
};

Acts quantize_like_device(const std::vector<float>& x, int64_t T, int64_t cols, float clip, int bits) {
  Acts a;
  a.T = T, a.ldc = (cols + 63) / 64 * 64, a.nsum = (cols + m::kSumCols - 1) / m::kSumCols;
  a.codes.assign(size_t(T * a.ldc), 0);
  a.sums.assign(size_t(T * a.nsum), 0);
  for (int64_t t = 0; t < T; ++t) {
    float mx = 0.0f;
    for (int64_t j = 0; j < cols; ++j) mx = std::max(mx, std::fabs(x[size_t(t * cols + j)]));
    const float s = m::guard_scale(m::mul_rn(clip, mx) / float((1 << (bits - 1)) - 1));
    a.scales.push_back(s);
    for (int64_t j = 0; j < cols; ++j) {
      const int c = formats::uniform::encode(x[size_t(t * cols + j)], s, 0, bits, true);
      a.codes[size_t(t * a.ldc + j)] = int8_t(c);
      a.sums[size_t(t * a.nsum + j / m::kSumCols)] += c;
    }
  }
  return a;
}

uint32_t word(const uint8_t* p) {
  uint32_t w;
  std::memcpy(&w, p, 4);
  return w;
}

// The GEMV kernel's work, thread by thread, in its order where the order matters.
std::vector<float> replay_gemv(const KernelWeights& w, const Acts& a, const float* bias) {
  const lowbit::FormatDesc& fd = lowbit::traits(w.format);
  const int bits = fd.bits, sc = m::step_cols(bits);
  const bool grouped = fd.group > 0, asym = !fd.symmetric;
  const int64_t blocks = (w.rows + 15) / 16;
  std::vector<float> y(size_t(a.T * w.rows), NAN);
  for (int64_t t = 0; t < a.T; ++t)
    for (int64_t b = 0; b < blocks; ++b) {
      const uint8_t* wb = w.codes.data() + b * w.steps * 64;
      const int8_t* xr = a.codes.data() + t * a.ldc;
      const int32_t* xs = a.sums.data() + t * a.nsum;
      auto share = [&](int tid, int64_t s, int32_t acc[4]) {
        const int q = tid % m::kQuarters;
        const uint32_t ws[4] = {word(wb + s * 64 + q * 16), word(wb + s * 64 + q * 16 + 4),
                                word(wb + s * 64 + q * 16 + 8), word(wb + s * 64 + q * 16 + 12)};
        const auto* xb = reinterpret_cast<const uint8_t*>(xr + s * sc);
        m::step_share(bits, ws, word(xb), bits == 4 ? word(xb + 4) : 0u, acc);
      };
      if (!grouped) {
        int32_t sum[16] = {};
        for (int tid = 0; tid < m::kThreads; ++tid) {
          int32_t acc[4] = {0, 0, 0, 0};
          for (int64_t s = tid / m::kQuarters; s < w.steps; s += m::kStepsPerPass) share(tid, s, acc);
          for (int i = 0; i < 4; ++i) sum[4 * (tid % m::kQuarters) + i] += acc[i];
        }
        int32_t xsum = 0;
        for (int64_t k = 0; k < a.nsum; ++k) xsum += xs[k];
        for (int r = 0; r < 16 && b * 16 + r < w.rows; ++r) {
          const float v = m::out_per_row(m::level_sum(bits, sum[r], 8, xsum), a.scales[size_t(t)],
                                         w.scales[size_t(b * 16 + r)]);
          y[size_t(t * w.rows + b * 16 + r)] = m::with_bias(v, bias, b * 16 + r);
        }
      } else {
        const int64_t gcols = w.cols / w.groups;
        const int spg = int(gcols / sc), gpp = m::kStepsPerPass / spg, chunks = int(gcols / m::kSumCols);
        float f[16] = {};
        for (int64_t p0 = 0; p0 < w.steps; p0 += m::kStepsPerPass) {
          int32_t gs[m::kStepsPerPass / 4][16] = {};
          for (int tid = 0; tid < m::kThreads; ++tid) {
            const int64_t s = p0 + tid / m::kQuarters;
            if (s >= w.steps) continue;
            int32_t acc[4] = {0, 0, 0, 0};
            share(tid, s, acc);
            for (int i = 0; i < 4; ++i) gs[(tid / m::kQuarters) / spg][4 * (tid % m::kQuarters) + i] += acc[i];
          }
          for (int r = 0; r < 16; ++r)
            for (int gi = 0; gi < gpp; ++gi) {
              const int64_t g = p0 / spg + gi;
              if (g >= w.groups) break;
              int32_t xsum = 0;
              for (int k = 0; k < chunks; ++k) xsum += xs[g * chunks + k];
              const size_t pi = size_t((b * w.groups + g) * 16 + r);
              const int32_t z = asym ? w.zeros[pi] : 8;
              f[r] = m::fold_group(f[r], w.scales[pi], m::level_sum(4, gs[gi][r], z, xsum));
            }
        }
        for (int r = 0; r < 16 && b * 16 + r < w.rows; ++r)
          y[size_t(t * w.rows + b * 16 + r)] = m::with_bias(m::out_grouped(f[r], a.scales[size_t(t)]), bias, b * 16 + r);
      }
    }
  return y;
}

// The tensor-core kernel's work (linear_kernels.cu gemm_tc_kernel): rounds of kTcChunk columns,
// the weights widened to int8 levels word by word as it stages them (zero past the last step),
// the integer dots of levels and codes (exact, so the tensor cores' order does not matter), and
// the folds at each group's last column in ascending order (per-row formats: once at the end).
std::vector<float> replay_gemm_tc(const KernelWeights& w, const Acts& a, const float* bias) {
  const lowbit::FormatDesc& fd = lowbit::traits(w.format);
  const int bits = fd.bits, sc = m::step_cols(bits);
  const bool grouped = fd.group > 0, asym = !fd.symmetric;
  const int64_t blocks = (w.rows + 15) / 16, gcols = grouped ? w.cols / w.groups : 1;
  const int64_t nchunk = (w.steps * sc + m::kTcChunk - 1) / m::kTcChunk;
  std::vector<float> y(size_t(a.T * w.rows), NAN);
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* wb = w.codes.data() + b * w.steps * 64;
    for (int r = 0; r < 16; ++r) {
      std::vector<int8_t> lv(size_t(nchunk * m::kTcChunk), 0);  // row r's levels, as Bs holds them
      for (int64_t s = 0; s < w.steps; ++s) {
        const uint32_t wd = word(wb + s * 64 + 4 * r);
        if (bits == 8) {
          const uint32_t l = m::levels_w8(wd);
          std::memcpy(lv.data() + s * 4, &l, 4);
        } else {
          const int32_t z = grouped && asym ? w.zeros[size_t((b * w.groups + s * sc / gcols) * 16 + r)] : 8;
          uint32_t lo = 0, hi = 0;
          m::levels_w4(wd, z, lo, hi);
          std::memcpy(lv.data() + s * 8, &lo, 4);
          std::memcpy(lv.data() + s * 8 + 4, &hi, 4);
        }
      }
      const int64_t row = b * 16 + r;
      if (row >= w.rows) continue;
      for (int64_t t = 0; t < a.T; ++t) {
        const int8_t* xr = a.codes.data() + t * a.ldc;
        int32_t acc = 0;
        float f = 0.0f;
        for (int64_t k = 0; k < nchunk * m::kTcChunk; k += 4) {
          acc = m::dot4_i8(word(reinterpret_cast<const uint8_t*>(lv.data() + k)),
                           word(reinterpret_cast<const uint8_t*>(xr + k)), acc);
          if (grouped && (k + 4) % gcols == 0 && k + 4 <= w.cols) {
            const size_t pi = size_t((b * w.groups + (k + 4) / gcols - 1) * 16 + r);
            f = m::fold_group(f, w.scales[pi], acc);
            acc = 0;
          }
        }
        const float v = grouped ? m::out_grouped(f, a.scales[size_t(t)])
                                : m::out_per_row(acc, a.scales[size_t(t)], w.scales[size_t(row)]);
        y[size_t(t * w.rows + row)] = m::with_bias(v, bias, row);
      }
    }
  }
  return y;
}

std::vector<float> normal(std::mt19937_64& rng, int64_t n, float outlier_every, float outlier) {
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = d(rng) * (outlier_every > 0 && i % int64_t(outlier_every) == 3 ? outlier : 1.0f);
  return v;
}

TEST(CudaLinearMath, ReplayOfTheKernelsEqualsRefGemmBitForBit) {
  std::mt19937_64 rng(40);
  const PackedFormat kWeights[] = {PackedFormat::W8_PerRow,   PackedFormat::W4_PerRow,    PackedFormat::W4_G32,
                                   PackedFormat::W4_G64,      PackedFormat::W4_G128,      PackedFormat::W4_G32_Asym,
                                   PackedFormat::W4_G64_Asym, PackedFormat::W4_G128_Asym};
  int cases = 0;
  for (const PackedFormat wf : kWeights) {
    const int g = lowbit::traits(wf).group;
    // Per-row: partial steps and several passes (257 / 4 = 65 steps of 8-bit, 33 of 4-bit);
    // grouped: 1 group, groups spanning passes (5·g columns), and a 1.5B-like width.
    const std::vector<int64_t> ks = g > 0 ? std::vector<int64_t>{g, 5 * int64_t(g), 1536}
                                          : std::vector<int64_t>{3, 100, 257, 1536};
    for (const int64_t K : ks)
      for (const int64_t N : {int64_t(1), int64_t(37)})
        for (const int64_t T : {int64_t(1), int64_t(3)})
          for (const float wclip : {1.0f, 0.8f}) {  // 0.8: clipped weights, 8-bit codes at -128
            SCOPED_TRACE(std::string(lowbit::traits(wf).name) + " K=" + std::to_string(K) + " N=" + std::to_string(N) +
                         " T=" + std::to_string(T) + " clip=" + std::to_string(wclip));
            const std::vector<float> wv = normal(rng, N * K, 7, 6.0f), xv = normal(rng, T * K, 11, 40.0f);
            const std::vector<float> bias = normal(rng, N, 0, 1.0f);
            const PackedTensor wp = lowbit::quantize(wf, wv.data(), N, K, wclip);
            const KernelWeights kw = lowbit::repack(wp);
            for (const PackedFormat af : {PackedFormat::A8_PerToken, PackedFormat::A4_PerToken}) {
              const int abits = lowbit::traits(af).bits;
              const Acts a = quantize_like_device(xv, T, K, 1.0f, abits);
              // The device quantizer's codes (A4: one per byte) and scales are lowbit::quantize_dynamic's.
              PackedTensor xp;
              lowbit::quantize_dynamic(af, xv.data(), T, K, 1.0f, xp);
              ASSERT_EQ(0, std::memcmp(xp.scales.data(), a.scales.data(), a.scales.size() * sizeof(float)));
              const int64_t xrb = formats::uniform::row_bytes(abits, K);
              for (int64_t t = 0; t < T; ++t)
                for (int64_t j = 0; j < K; ++j)
                  ASSERT_EQ(formats::uniform::code_at(xp.codes.data() + t * xrb, j, abits), int(a.codes[size_t(t * a.ldc + j)]))
                      << lowbit::traits(af).name << " token " << t << " column " << j;
              for (const bool with_bias : {false, true}) {
                std::vector<float> want(size_t(T * N));
                lowbit::ref::gemm(xp, wp, with_bias ? bias.data() : nullptr, want.data());
                const std::vector<float> got = replay_gemv(kw, a, with_bias ? bias.data() : nullptr);
                ASSERT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * sizeof(float)));
                const std::vector<float> tc = replay_gemm_tc(kw, a, with_bias ? bias.data() : nullptr);
                ASSERT_EQ(0, std::memcmp(want.data(), tc.data(), want.size() * sizeof(float))) << "tensor-core path";
              }
            }
            ++cases;
          }
  }
  EXPECT_EQ(cases, (6 * 3 + 2 * 4) * 2 * 2 * 2);  // 3 widths per grouped format, 4 per per-row one
}

}  // namespace
}  // namespace sinkq::cuda
