// tests/cuda/device/attention_device_test.cc — the device attention (cuda/attention.h) against the
// double oracle lowbit::ref::attention_packed, within a bound derived for its arithmetic, on every
// dynamic KV body format, GQA groups of 1..12, head_dim 20..128, with and without a prefix, decode
// and prefill chunks, contexts of several splits, a sliding window and a soft-cap; every output
// written. Run on a GPU by scripts/device_check.sh (see linear_device_test.cc).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "cuda/attention.h"
#include "device_util.h"
#include "formats/quantizer.h"
#include "kernels/ops.h"
#include "lowbit/formats.h"
#include "lowbit/codebook_testutil.h"
#include "lowbit/kv_kernels.h"

namespace sinkq::cuda {
namespace {

using lowbit::PackedFormat;

constexpr double kU = 0x1p-24;
double gamma(double n) { return n * kU / (1.0 - n * kU); }
constexpr double kExpRel = 4 * kU;  // CUDA expf / tanhf: at most 2 ulp

std::vector<float> rows_of(std::mt19937_64& rng, int64_t n, int kv_heads, int D, float mul) {
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(size_t(n * kv_heads * D));
  for (size_t i = 0; i < v.size(); ++i) v[i] = mul * d(rng) * (i % 7 == 3 ? 6.0f : 1.0f) + 0.5f * float((i / size_t(D)) % size_t(kv_heads));
  return v;
}

using devtest::to_device;

struct Case {
  int H, Hkv, D, window;
  int64_t P, n_past, T;
  float softcap;
};

void check_case(std::mt19937_64& rng, PackedFormat f, const Case& c) {
  const std::string what = std::string(lowbit::kv_traits(f).name) + " H=" + std::to_string(c.H) + " Hkv=" +
                           std::to_string(c.Hkv) + " D=" + std::to_string(c.D) + " P=" + std::to_string(c.P) +
                           " n_past=" + std::to_string(c.n_past) + " T=" + std::to_string(c.T) +
                           " window=" + std::to_string(c.window) + " softcap=" + std::to_string(c.softcap);
  SCOPED_TRACE(what);
  const int64_t rows = c.n_past + c.T, C = int64_t(c.Hkv) * c.D;
  lowbit::PackedKvCache cache(f, 2, c.Hkv, c.D, rows + 5);
  const std::vector<float> k = rows_of(rng, rows, c.Hkv, c.D, 1.0f), v = rows_of(rng, rows, c.Hkv, c.D, 1.0f);
  for (int64_t r0 = 0; r0 < rows;) {  // stored in chunks of 1..4 rows, as decoding and prefill do
    const int64_t n = std::min<int64_t>(rows - r0, 1 + r0 % 4);
    cache.store(1, r0, k.data() + r0 * C, v.data() + r0 * C, n);
    r0 += n;
  }
  const std::vector<float> pk = rows_of(rng, c.P, c.Hkv, c.D, 3.0f), pv = rows_of(rng, c.P, c.Hkv, c.D, 1.0f);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> q(size_t(c.T * c.H * c.D));
  for (float& x : q) x = u(rng);
  AttnShape s{c.H, c.Hkv, c.D, c.window};
  s.softcap = c.softcap;
  std::vector<float> ref(q.size());
  lowbit::ref::attention_packed(s, q.data(), KvSegment{pk.data(), pv.data(), c.P}, cache, 1, c.n_past, c.T, ref.data());

  const DeviceKvLayer body(cache, 1);
  const DeviceBuffer qd = to_device(q), pkd = to_device(pk), pvd = to_device(pv);
  DeviceBuffer out = to_device(std::vector<float>(q.size(), NAN)), scratch;
  attention_packed(s, qd.as<float>(), pkd.as<float>(), pvd.as<float>(), c.P, body, c.n_past, c.T, out.as<float>(), scratch);
  std::vector<float> got(q.size());
  out.download(got.data(), got.size() * sizeof(float));

  // The bound, per output (first order; lowbit's tests/lowbit/kv_test.cc derives the CPU's): a
  // score errs by scale·γ_{D+2}·Σ_d|q_d k̂_jd| + u·|s_j| (D-term dot, times s_j and the scale;
  // with a soft-cap, its tanhf adds kExpRel·cap). Each weight p_j goes through two exps (inside
  // its split and at the merge), each from a rounded difference (u·spread) with kExpRel of its
  // own, in numerator and denominator; the sums have at most n + S terms (S splits) plus the
  // products p_j·s_j and the merge weights: |got - ref| <= rel·Σ_j p_j|v̂_jd| + u|ref| with
  // rel = 2·max_ds + 4u·spread + 4·kExpRel + 2γ_{n+S+4} + 8u.
  std::vector<float> kb(size_t(rows * C)), vb(kb.size());
  cache.dequantize(1, false, 0, rows, kb.data());
  cache.dequantize(1, true, 0, rows, vb.data());
  const int group = c.H / c.Hkv;
  const double scale = double(s.score_scale());
  const int64_t keys_max = c.window > 0 ? std::min<int64_t>(c.P + rows, c.window) : c.P + rows;
  const double splits = double((keys_max + 127) / 128);
  for (int64_t t = 0; t < c.T; ++t)
    for (int h = 0; h < c.H; ++h) {
      const int g = h / group;
      const int64_t hi = c.P + c.n_past + t, lo = c.window > 0 ? std::max<int64_t>(0, hi - c.window + 1) : 0;
      const int64_t n = hi - lo + 1;
      auto key = [&](int64_t j) { return j < c.P ? pk.data() + (j * c.Hkv + g) * c.D : kb.data() + ((j - c.P) * c.Hkv + g) * c.D; };
      auto val = [&](int64_t j) { return j < c.P ? pv.data() + (j * c.Hkv + g) * c.D : vb.data() + ((j - c.P) * c.Hkv + g) * c.D; };
      const float* qv = q.data() + (t * c.H + h) * c.D;
      std::vector<double> p(static_cast<size_t>(n));
      double max_ds = 0, m = -INFINITY;
      for (int64_t j = 0; j < n; ++j) {
        double dot = 0, mag = 0;
        for (int d = 0; d < c.D; ++d) dot += double(qv[d]) * key(lo + j)[d], mag += std::fabs(double(qv[d]) * key(lo + j)[d]);
        double sc = scale * dot;
        if (c.softcap > 0) sc = c.softcap * std::tanh(sc / c.softcap);
        p[size_t(j)] = sc;
        max_ds = std::max(max_ds, scale * gamma(c.D + 2) * mag + kU * std::fabs(sc) + (c.softcap > 0 ? kExpRel * c.softcap : 0));
        m = std::max(m, sc);
      }
      double sum = 0, spread = 0;
      for (double& x : p) spread = std::max(spread, m - x), sum += x = std::exp(x - m);
      const double rel = 2 * max_ds + 4 * kU * spread + 4 * kExpRel + 2 * gamma(double(n) + splits + 4) + 8 * kU;
      for (int d = 0; d < c.D; ++d) {
        double mag = 0;
        for (int64_t j = 0; j < n; ++j) mag += p[size_t(j)] / sum * std::fabs(double(val(lo + j)[d]));
        const size_t i = size_t((t * c.H + h) * c.D + d);
        ASSERT_FALSE(std::isnan(got[i])) << "not written: t=" << t << " h=" << h << " d=" << d;
        ASSERT_LE(std::fabs(double(got[i]) - ref[i]), rel * mag + kU * std::fabs(double(ref[i])) + 1e-30)
            << "t=" << t << " h=" << h << " d=" << d << " got " << got[i] << " ref " << ref[i];
      }
    }
}

TEST(CudaAttention, WithinTheBoundOfTheDoubleOracle) {
  std::string why;
  ASSERT_TRUE(device_available(&why)) << "no CUDA device: " << why;
  std::mt19937_64 rng(4044);
  std::vector<Case> cases;
  for (auto [H, Hkv, D] : {std::tuple{8, 2, 64}, std::tuple{12, 2, 128}, std::tuple{9, 3, 32}, std::tuple{4, 4, 20}})
    for (int64_t P : {0, 3})
      for (int64_t T : {1, 6})
        for (int64_t n_past : {0, 17, 300}) cases.push_back({H, Hkv, D, 0, P, n_past, T, 0.0f});
  cases.push_back({8, 2, 64, 100, 3, 300, 6, 0.0f});  // a window inside the body, over several splits
  cases.push_back({8, 2, 64, 12, 5, 2, 6, 0.0f});     // a window reaching into the prefix
  cases.push_back({8, 4, 64, 0, 1, 200, 3, 30.0f});   // Gemma 2's soft-cap
  for (const lowbit::FormatDesc& t : lowbit::kKvFormats) {
    if (!t.dynamic()) continue;  // the static ones need calibrated params; the same kernels read them
    for (const Case& c : cases) check_case(rng, t.format, c);
  }
}

// The codebook body (KVQuant's nuqX; DeviceCbLayer + attention_codebook) against the double oracle
// lowbit::ref::attention_codebook, within the CPU kernels' bound (tests/lowbit/codebook_testutil.h)
// extended by the split merge: every case of the CPU test (2 / 3 / 4 bits, keys and values per
// channel or per token, 0 / 5% outliers, RoPE on the decoded keys, two query bases, windows) plus
// contexts of several splits and a group of 12 at head_dim 128.
void check_codebook(std::mt19937_64& rng, const lowbit::cbtest::Case& c) {
  const lowbit::cbtest::Scene s = lowbit::cbtest::make(rng, c);
  const AttnShape shape{c.H, c.Hkv, c.D, c.window};
  const KvSegment pre{s.pk.data(), s.pv.data(), c.P};
  const float* cs = c.rope ? s.cs.data() + c.P * c.D : nullptr;
  std::vector<float> ref(s.q.size(), NAN);
  lowbit::ref::attention_codebook(shape, s.q.data(), s.q_body(), pre, s.cache, 1, c.n_past, c.T, cs, ref.data());
  const DeviceCbLayer body(s.cache, 1, c.D);
  const DeviceBuffer qd = to_device(s.q), qbd = to_device(s.qb), pkd = to_device(s.pk), pvd = to_device(s.pv);
  const std::vector<float> cs_rows = c.rope ? std::vector<float>(s.cs.begin() + c.P * c.D, s.cs.end()) : std::vector<float>();
  const DeviceBuffer csd = to_device(cs_rows);
  DeviceBuffer out = to_device(std::vector<float>(s.q.size(), NAN)), scratch;
  attention_codebook(shape, qd.as<float>(), s.qb.empty() ? nullptr : qbd.as<float>(), pkd.as<float>(), pvd.as<float>(),
                     c.P, body, c.n_past, c.T, c.rope ? csd.as<float>() : nullptr, out.as<float>(), scratch);
  std::vector<float> got(s.q.size());
  out.download(got.data(), got.size() * sizeof(float));
  const int64_t keys = c.P + c.n_past + c.T;
  const int64_t keys_max = c.window > 0 ? std::min<int64_t>(keys, c.window) : keys;
  lowbit::cbtest::check(c, s, got, ref, "device", int((keys_max + 127) / 128));
}

std::vector<lowbit::cbtest::Case> codebook_cases() {
  std::vector<lowbit::cbtest::Case> v = lowbit::cbtest::cases();
  v.push_back({8, 2, 64, 0, 3, 300, 2, 3, true, false, true, 0.01});     // 3 splits, pre-RoPE keys per channel
  v.push_back({4, 4, 128, 200, 0, 400, 1, 4, false, true, false, 0.05});  // a window over 2 splits, MHA
  v.push_back({12, 2, 128, 0, 3, 130, 6, 2, true, true, true, 0.05});     // a group of 12, prefill of 6
  return v;
}

TEST(CudaCodebookAttention, WithinTheBoundOfTheDoubleOracle) {
  std::string why;
  ASSERT_TRUE(device_available(&why)) << "no CUDA device: " << why;
  std::mt19937_64 rng(4047);
  for (const lowbit::cbtest::Case& c : codebook_cases()) check_codebook(rng, c);
}

TEST(CudaCodebookAttention, SmallCasesForTheSanitizers) {
  std::string why;
  ASSERT_TRUE(device_available(&why)) << "no CUDA device: " << why;
  std::mt19937_64 rng(4048);
  check_codebook(rng, {4, 2, 32, 0, 3, 140, 2, 3, true, false, true, 0.05});
}

// A few cases for compute-sanitizer's memcheck / racecheck (scripts/device_check.sh).
TEST(CudaAttention, SmallCasesForTheSanitizers) {
  std::string why;
  ASSERT_TRUE(device_available(&why)) << "no CUDA device: " << why;
  std::mt19937_64 rng(4045);
  for (const PackedFormat f : {PackedFormat::KV8_PerHead, PackedFormat::KV4_PerToken_Asym})
    check_case(rng, f, Case{8, 2, 64, 0, 3, 300, 2, 0.0f});
}

// Rows stored on the device are the CPU store's bytes (codes, scales, zero points), for every
// KV format, stored in uneven chunks. Dynamic formats: a non-finite value is refused naming K / V,
// row, column. Static ones (params calibrated with clip 0.8 on the rows, so some values clip): the
// codes under the uploaded params, ±inf and NaN clamped as quant::quantize_to_int clamps them.
TEST(CudaKvStore, EqualsTheCpuStoreByteForByte) {
  std::string why;
  ASSERT_TRUE(device_available(&why)) << "no CUDA device: " << why;
  std::mt19937_64 rng(4046);
  for (const lowbit::FormatDesc& t : lowbit::kKvFormats) {
    for (const auto& [Hkv, D] : {std::pair{2, 64}, std::pair{3, 20}, std::pair{4, 128}}) {
      SCOPED_TRACE(std::string(t.name) + " Hkv=" + std::to_string(Hkv) + " D=" + std::to_string(D));
      const int64_t rows = 37, C = int64_t(Hkv) * D;
      std::vector<float> k = rows_of(rng, rows, Hkv, D, 1.0f), v = rows_of(rng, rows, Hkv, D, 1.0f);
      std::vector<quant::Params> sk, sv;
      if (!t.dynamic()) {
        quant::Calibrator ck(lowbit::kv_spec(t.format, D, 0.8f)), cv(lowbit::kv_spec(t.format, D, 0.8f));
        ck.observe(k.data(), rows, C);
        cv.observe(v.data(), rows, C);
        sk.push_back(ck.params()), sv.push_back(cv.params());
        k[size_t(3 * C + 1)] = INFINITY, k[size_t(3 * C + 2)] = -INFINITY, v[size_t(4 * C + 5)] = NAN;
      }
      lowbit::PackedKvCache cpu(t.format, 1, Hkv, D, rows + 3, sk, sv), empty(t.format, 1, Hkv, D, rows + 3, sk, sv);
      for (int64_t i = 0; i < C; ++i) k[size_t(5 * C + i)] = std::fabs(k[size_t(5 * C + i)]);  // a row >= 0 (asym: lo = 0)
      std::fill(v.begin() + 6 * C, v.begin() + 7 * C, 0.0f);                                  // an all-zero row
      DeviceKvLayer dev(empty, 0);
      const DeviceBuffer kd = to_device(k), vd = to_device(v);
      for (int64_t r0 = 0, step = 1; r0 < rows; r0 += step, step = step % 5 + 1) {
        const int64_t n = std::min(step, rows - r0);
        cpu.store(0, r0, k.data() + r0 * C, v.data() + r0 * C, n);
        dev.store(r0, kd.as<float>() + r0 * C, vd.as<float>() + r0 * C, n);
      }
      for (const bool value : {false, true}) {
        const DeviceKvLayer::HostArrays got = dev.download(value);
        const lowbit::KvRows r = cpu.rows(0, value, 0);
        const size_t nparam = size_t(lowbit::kv_param_count(t, Hkv, rows + 3));
        ASSERT_EQ(0, std::memcmp(got.codes.data(), r.codes, size_t(rows * r.ld))) << (value ? "V" : "K") << " codes";
        const size_t used = !t.dynamic() ? nparam  // the calibrated params, uploaded and left as they are
                            : t.granularity == quant::Granularity::PerHead ? size_t(rows * Hkv) : size_t(rows);
        ASSERT_LE(used, nparam);
        ASSERT_EQ(0, std::memcmp(got.scales.data(), r.scale, used * sizeof(float))) << (value ? "V" : "K") << " scales";
        if (r.zero) {
          ASSERT_EQ(0, std::memcmp(got.zeros.data(), r.zero, used)) << (value ? "V" : "K") << " zeros";
        }
      }
      if (!t.dynamic()) continue;  // static formats clamp (above), they do not refuse
      std::vector<float> badv = v;
      badv[size_t(2 * C + 7)] = NAN;
      const DeviceBuffer bd = to_device(badv);
      try {
        dev.store(0, kd.as<float>(), bd.as<float>(), 3);
        ADD_FAILURE() << "no error";
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("in V at row 2, col 7"), std::string::npos) << e.what();
      }
    }
  }
}

TEST(CudaAttention, RefusesShapesItDoesNotTake) {
  std::string why;
  ASSERT_TRUE(device_available(&why)) << "no CUDA device: " << why;
  lowbit::PackedKvCache cache(PackedFormat::KV8_PerHead, 1, 1, 64, 8);
  const DeviceKvLayer body(cache, 0);
  DeviceBuffer scratch, buf(32 * 64 * sizeof(float));
  EXPECT_THROW(attention_packed(AttnShape{32, 1, 64}, buf.as<float>(), nullptr, nullptr, 0, body, 0, 1, buf.as<float>(), scratch),
               Error);  // 32 query heads per kv head
  EXPECT_THROW(attention_packed(AttnShape{4, 1, 64}, buf.as<float>(), nullptr, nullptr, 0, body, 4, 5, buf.as<float>(), scratch),
               Error);  // rows beyond the body
  EXPECT_THROW(DeviceKvLayer(cache, 1), Error);
  EXPECT_THROW(attention_packed(AttnShape{4, 1, 64}, buf.as<float>(), nullptr, nullptr, 2, body, 0, 1, buf.as<float>(), scratch),
               Error);  // a prefix without its rows
}

}  // namespace
}  // namespace sinkq::cuda
