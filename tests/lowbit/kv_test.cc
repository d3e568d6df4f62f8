// tests/lowbit/kv_test.cc — the KV cache formats, the packed store against the quantizer, and
// attention over [fp32 prefix; int8 / int4 body] on every ISA against the double oracle, and the
// oracle against fp32-cache attention over the dequantized (= fake-quant) body.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "formats/quantizer.h"
#include "kernels/cpu_features.h"
#include "kernels/ops.h"
#include "lowbit/formats.h"
#include "lowbit/kv_kernels.h"
#include "lowbit/kv_testutil.h"
#include "util/testutil.h"

namespace sinkq::lowbit {
namespace {

using testing::bit_equal;
using ::testing::HasSubstr;
using sinkq::testing::error_of;

constexpr double kU = 0x1p-24;  // fp32 unit roundoff
double gamma(double n) { return n * kU / (1.0 - n * kU); }
constexpr double kExpRel = 4 * kU;  // the SIMD exp polynomial (kernels tests: ~2-3 ulp measured)

struct IsaGuard {
  Isa isa = active_isa();
  ~IsaGuard() { set_isa(isa); }
};

std::vector<Isa> all_isas() {
  std::vector<Isa> v;
  for (int i = 0; i <= int(detected_isa()); ++i) v.push_back(Isa(i));
  return v;
}

using kvtest::kv_data;

TEST(KvFormats, TableAndLookup) {
  int i = 0;
  for (const FormatDesc& t : kKvFormats) {
    EXPECT_EQ(int(t.format), 64 + i++);
    EXPECT_EQ(&kv_traits(t.format), &t);
    EXPECT_EQ(parse_kv_format(t.name), t.format);
    EXPECT_EQ(kv_format(t.bits, t.symmetric, t.granularity), t.format);
    const quant::QuantSpec s = kv_spec(t.format, 16, 0.9f);
    EXPECT_EQ(s.bits, t.bits);
    EXPECT_EQ(s.symmetric, t.symmetric);
    EXPECT_EQ(s.granularity, t.granularity);
    EXPECT_EQ(s.clip_ratio, 0.9f);
    EXPECT_NO_THROW(quant::validate(s, 3, 64));
  }
  EXPECT_EQ(int(PackedFormat::KV8_PerHead), 64);
  EXPECT_EQ(int(PackedFormat::KV4_PerHead), 65);
  EXPECT_EQ(int(PackedFormat::KV4_StaticTensor_Asym), 79);
  EXPECT_THAT(error_of([] { kv_traits(PackedFormat::W8_PerRow); }), HasSubstr("not a KV cache format"));
  EXPECT_THAT(error_of([] { traits(PackedFormat::KV8_PerHead); }), HasSubstr("not a packed format"));
  EXPECT_THAT(error_of([] { parse_kv_format("kv3_per_head"); }), HasSubstr("kv4_per_head"));
  EXPECT_THAT(error_of([] { kv_format(3, true, quant::Granularity::PerHead); }), HasSubstr("int3"));
  EXPECT_THAT(error_of([] { kv_format(8, true, quant::Granularity::PerGroup); }), HasSubstr("per_group"));
  // 1B shape (22 layers, 4 KV heads x 64, 2048 rows): fp32 is 2·22·2048·256·4 bytes.
  const int64_t fp32 = int64_t(2) * 22 * 2048 * 256 * 4;
  const int64_t i8 = kv_cache_bytes(PackedFormat::KV8_PerHead, 22, 4, 64, 2048);
  const int64_t i4 = kv_cache_bytes(PackedFormat::KV4_PerHead, 22, 4, 64, 2048);
  EXPECT_EQ(i8, int64_t(2) * 22 * 2048 * (256 + 4 * 4));
  EXPECT_EQ(i4, int64_t(2) * 22 * 2048 * (128 + 4 * 4));
  std::printf("  KV cache, 1B shape, 2048 rows: fp32 %lld B, kv8_per_head %lld B (x%.3f), kv4_per_head %lld B "
              "(x%.3f), kv4_static_head %lld B\n",
              (long long)fp32, (long long)i8, double(i8) / double(fp32), (long long)i4, double(i4) / double(fp32),
              (long long)kv_cache_bytes(PackedFormat::KV4_StaticHead, 22, 4, 64, 2048));
}

// A 2-layer cache of format f holding `rows` random rows (stored in chunks), with static params
// calibrated with clip 0.8 on those rows (so some values clip).
struct Filled {
  std::vector<float> k, v;  // the fp32 rows stored into layer 1
  PackedKvCache cache;
};
Filled fill(std::mt19937_64& rng, PackedFormat f, int kv_heads, int D, int64_t rows, int64_t capacity) {
  const FormatDesc& t = kv_traits(f);
  std::vector<float> k = kv_data(rng, rows, kv_heads, D), v = kv_data(rng, rows, kv_heads, D);
  for (float& x : v) x *= 0.5f;
  std::vector<quant::Params> sk, sv;
  if (!t.dynamic()) {
    for (int l = 0; l < 2; ++l) {
      quant::Calibrator ck(kv_spec(f, D, 0.8f)), cv(kv_spec(f, D, 1.0f));
      ck.observe(k.data(), rows, int64_t(kv_heads) * D);
      cv.observe(v.data(), rows, int64_t(kv_heads) * D);
      sk.push_back(ck.params());
      sv.push_back(cv.params());
    }
  }
  Filled out{k, v, PackedKvCache(f, 2, kv_heads, D, capacity, sk, sv)};
  const int64_t C = int64_t(kv_heads) * D;
  for (int64_t r0 = 0; r0 < rows;) {  // chunks of 1, 2, 3, ... rows
    const int64_t n = std::min<int64_t>(rows - r0, 1 + r0 % 4);
    out.cache.store(1, r0, k.data() + r0 * C, v.data() + r0 * C, n);
    r0 += n;
  }
  return out;
}

// dequantize(store(x)) == quant::fake_quant(x), bit for bit, for every format; the static
// formats with the calibrated params, the dynamic ones with params of each stored chunk.
TEST(KvCache, StoreEqualsFakeQuant) {
  std::mt19937_64 rng(1);
  for (const FormatDesc& t : kKvFormats)
    for (int D : {8, 20, 64}) {
      SCOPED_TRACE(std::string(t.name) + " D=" + std::to_string(D));
      const int H = 3;
      const int64_t rows = 13, C = int64_t(H) * D;
      Filled f = fill(rng, t.format, H, D, rows, rows + 2);
      for (int value = 0; value < 2; ++value) {
        std::vector<float> want = value ? f.v : f.k, got(want.size());
        if (t.dynamic()) {
          quant::fake_quant_dynamic(kv_spec(t.format, D), want.data(), rows, C);
        } else {
          quant::Calibrator c(kv_spec(t.format, D, value ? 1.0f : 0.8f));
          c.observe(value ? f.v.data() : f.k.data(), rows, C);
          quant::fake_quant(kv_spec(t.format, D), c.params(), want.data(), rows, C);
        }
        f.cache.dequantize(1, value == 1, 0, rows, got.data());
        EXPECT_TRUE(bit_equal(got, want)) << (value ? "V" : "K");
      }
    }
}

TEST(KvCache, ShapesAndErrors) {
  EXPECT_THAT(error_of([] { PackedKvCache(PackedFormat::KV4_PerHead, 2, 2, 7, 8); }),
              HasSubstr("even head_dim (got 7)"));
  EXPECT_NO_THROW(PackedKvCache(PackedFormat::KV8_PerHead, 2, 2, 7, 8));  // int8: any head_dim
  EXPECT_THAT(error_of([] { PackedKvCache(PackedFormat::KV8_StaticHead, 2, 2, 8, 8); }),
              HasSubstr("needs calibrated K and V params for each of the 2 layers"));
  quant::Params p = quant::compute_params(kv_spec(PackedFormat::KV8_StaticTensor, 8), std::vector<float>(16, 1.0f).data(), 1, 16);
  EXPECT_THAT(error_of([&] { PackedKvCache(PackedFormat::KV8_StaticHead, 1, 2, 8, 8, {p}, {p}); }),
              HasSubstr("int8 sym per_tensor, format kv8_static_head needs int8 sym per_head_shared"));
  EXPECT_THAT(error_of([&] { PackedKvCache(PackedFormat::KV8_StaticTensor, 1, 2, 16, 8, {p}, {p}); }),
              HasSubstr("over 16 columns"));
  PackedKvCache c(PackedFormat::KV4_PerToken_Asym, 3, 2, 8, 10);
  EXPECT_EQ(c.bytes(), size_t(kv_cache_bytes(PackedFormat::KV4_PerToken_Asym, 3, 2, 8, 10)));
  EXPECT_EQ(c.bytes(), size_t(2 * 3 * (10 * 8 + 10 * 5)));
  std::vector<float> x(32, 1.0f);
  EXPECT_THAT(error_of([&] { c.store(0, 9, x.data(), x.data(), 2); }), HasSubstr("outside the capacity of 10"));
  x[3] = NAN;
  EXPECT_THAT(error_of([&] { c.store(0, 0, x.data(), x.data(), 2); }), HasSubstr("non-finite"));
}

struct Case {
  int H, Hkv, D, window;
  int64_t P, n_past, T;
};

struct Scene {
  std::vector<float> q, pk, pv;  // q [T, H, D]; prefix K/V [P, Hkv, D]
  Filled body;
};

Scene make(std::mt19937_64& rng, PackedFormat f, const Case& c) {
  const int64_t rows = c.n_past + c.T;
  Scene s{{}, {}, {}, fill(rng, f, c.Hkv, c.D, rows, rows + 3)};
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  s.q.resize(size_t(c.T * c.H * c.D));
  for (float& x : s.q) x = u(rng);
  s.pk = kv_data(rng, c.P, c.Hkv, c.D);
  s.pv = kv_data(rng, c.P, c.Hkv, c.D);
  for (float& x : s.pk) x *= 3.0f;  // sink-like prefix keys: large scores
  return s;
}

// |got - ref| for every output, against the bound of a fp32 computation of the same formula:
// scores err by γ_{D+2}·scale·Σ|q_d k̂_jd| (a D-term dot, times s_j and the scale), the fp32 shift
// x_j - m by u·|x_j - m| which exp turns into relative error, plus kExpRel; the softmax sum of n
// terms adds γ_n, the weighted sum of n terms γ_{n+2} (its products p_j·s_j and the alpha) — so
// |got - ref| <= (2·max_ds + 2u·spread + 2·kExpRel + 2γ_{n+2} + 4u)·Σ_j p_j|v̂_jd| + u|ref|
// (first order; the same bound as tests/kernels/attention_test.cc for the fp32 cache).
void check(const Case& c, const Scene& s, const std::vector<float>& got, const std::vector<float>& ref,
           const std::string& what) {
  const int group = c.H / c.Hkv;
  const double scale = double(float(1.0 / std::sqrt(double(c.D))));
  const int64_t C = int64_t(c.Hkv) * c.D;
  std::vector<float> kb(size_t((c.n_past + c.T) * C)), vb(kb.size());
  s.body.cache.dequantize(1, false, 0, c.n_past + c.T, kb.data());
  s.body.cache.dequantize(1, true, 0, c.n_past + c.T, vb.data());
  for (int64_t t = 0; t < c.T; ++t)
    for (int h = 0; h < c.H; ++h) {
      const int g = h / group;
      const int64_t hi = c.P + c.n_past + t;
      const int64_t lo = c.window > 0 ? std::max<int64_t>(0, hi - c.window + 1) : 0;
      const int64_t n = hi - lo + 1;
      auto row = [&](const std::vector<float>& pre, const std::vector<float>& body, int64_t j) {
        return j < c.P ? pre.data() + j * C + g * c.D : body.data() + (j - c.P) * C + g * c.D;
      };
      const float* q = s.q.data() + (t * c.H + h) * c.D;
      std::vector<double> sc(static_cast<size_t>(n));
      double max_ds = 0, mx = -INFINITY;
      for (int64_t j = 0; j < n; ++j) {
        const float* k = row(s.pk, kb, lo + j);
        double dot = 0, mag = 0;
        for (int d = 0; d < c.D; ++d) dot += double(q[d]) * k[d], mag += std::fabs(double(q[d]) * k[d]);
        sc[size_t(j)] = scale * dot;
        max_ds = std::max(max_ds, scale * gamma(c.D + 2) * mag + kU * std::fabs(sc[size_t(j)]));
        mx = std::max(mx, sc[size_t(j)]);
      }
      double sum = 0, spread = 0;
      for (double& x : sc) spread = std::max(spread, mx - x), sum += x = std::exp(x - mx);
      const double rel = 2 * max_ds + 2 * kU * spread + 2 * kExpRel + 2 * gamma(double(n + 2)) + 4 * kU;
      for (int d = 0; d < c.D; ++d) {
        double mag = 0;
        for (int64_t j = 0; j < n; ++j) mag += sc[size_t(j)] / sum * std::fabs(double(row(s.pv, vb, lo + j)[d]));
        const size_t i = size_t((t * c.H + h) * c.D + d);
        ASSERT_LE(std::fabs(double(got[i]) - ref[i]), rel * mag + kU * std::fabs(double(ref[i])) + 1e-30)
            << what << " H=" << c.H << " Hkv=" << c.Hkv << " D=" << c.D << " P=" << c.P << " n_past=" << c.n_past
            << " T=" << c.T << " window=" << c.window << " t=" << t << " h=" << h << " d=" << d;
      }
    }
}

// Cases: GQA 4:2, 8:2, 16:2 (a group of 8: the batched score sums) and 9:1 (8 + 1), MHA 3:3; head_dim 8 (< one AVX2 vector), 20 (a partial chunk on
// both ISAs), 32, 64; prefix absent / 3 rows; decode (T = 1) and prefill (T = 6) after 0 or 17
// body rows; one sliding window.
std::vector<Case> cases() {
  std::vector<Case> v;
  int i = 0;
  const int kDs[] = {8, 20, 32, 64};
  for (auto [H, Hkv] : {std::pair{4, 2}, std::pair{8, 2}, std::pair{3, 3}, std::pair{16, 2}, std::pair{9, 1}})
    for (int64_t P : {0, 3})
      for (int64_t T : {1, 6})
        for (int64_t n_past : {0, 17}) v.push_back({H, Hkv, kDs[i++ % 4], 0, P, n_past, T});
  v.push_back({4, 2, 64, 9, 3, 17, 6});   // window inside the body
  v.push_back({4, 2, 32, 12, 5, 2, 6});   // window reaching into the prefix
  return v;
}

// Every ISA path against the double oracle, every format and case.
TEST(KvAttention, EveryIsaMatchesOracle) {
  IsaGuard guard;
  std::mt19937_64 rng(2);
  int n = 0;
  for (const FormatDesc& t : kKvFormats)
    for (const Case& c : cases()) {
      const Scene s = make(rng, t.format, c);
      const AttnShape shape{c.H, c.Hkv, c.D, c.window};
      const KvSegment pre{s.pk.data(), s.pv.data(), c.P};
      std::vector<float> ref(s.q.size(), NAN);
      ref::attention_packed(shape, s.q.data(), pre, s.body.cache, 1, c.n_past, c.T, ref.data());
      for (Isa isa : all_isas()) {
        set_isa(isa);
        std::vector<float> got(s.q.size(), NAN);
        attention_packed(shape, s.q.data(), pre, s.body.cache, 1, c.n_past, c.T, got.data());
        check(c, s, got, ref, std::string(t.name) + " " + std::string(isa_name(isa)));
        ++n;
      }
    }
  EXPECT_GT(n, 16 * 42);
}

// The oracle against the fp32-cache attention of kernels/ops.h (its double reference and its fast
// path) over [prefix; dequantized body]: the dequantized body is what the simulator stores after
// fake-quant, x̂ = fl(s·l), while the oracle uses s·l exactly — a relative difference of at most u
// per element, i.e. the fp32 rounding bound of check() covers it (the fast path adds its own).
TEST(KvAttention, OracleMatchesFp32AttentionOverDequantizedCache) {
  IsaGuard guard;
  std::mt19937_64 rng(3);
  for (const FormatDesc& t : kKvFormats)
    for (const Case& c : cases()) {
      const Scene s = make(rng, t.format, c);
      const AttnShape shape{c.H, c.Hkv, c.D, c.window};
      const KvSegment pre{s.pk.data(), s.pv.data(), c.P};
      const int64_t C = int64_t(c.Hkv) * c.D;
      std::vector<float> kb(size_t((c.n_past + c.T) * C)), vb(kb.size());
      s.body.cache.dequantize(1, false, 0, c.n_past + c.T, kb.data());
      s.body.cache.dequantize(1, true, 0, c.n_past + c.T, vb.data());
      std::vector<float> oracle(s.q.size(), NAN), fp_ref(s.q.size(), NAN), fp_fast(s.q.size(), NAN);
      ref::attention_packed(shape, s.q.data(), pre, s.body.cache, 1, c.n_past, c.T, oracle.data());
      sinkq::ref::attention(shape, s.q.data(), pre, kb.data(), vb.data(), c.n_past, c.T, fp_ref.data());
      check(c, s, fp_ref, oracle, std::string(t.name) + " fp32 ref over dequantized");
      for (Isa isa : all_isas()) {
        set_isa(isa);
        sinkq::attention(shape, s.q.data(), pre, kb.data(), vb.data(), c.n_past, c.T, fp_fast.data());
        check(c, s, fp_fast, oracle, std::string(t.name) + " fp32 fast " + std::string(isa_name(isa)));
      }
    }
}

// Results do not depend on the thread count (each (t, h) is computed by one thread).
TEST(KvAttention, IndependentOfThreads) {
  std::mt19937_64 rng(4);
  const Case c{8, 2, 64, 0, 3, 200, 40};
  const Scene s = make(rng, PackedFormat::KV4_PerHead_Asym, c);
  const AttnShape shape{c.H, c.Hkv, c.D, 0};
  const KvSegment pre{s.pk.data(), s.pv.data(), c.P};
  const int nt = num_threads();
  std::vector<float> a(s.q.size()), b(s.q.size());
  set_num_threads(1);
  attention_packed(shape, s.q.data(), pre, s.body.cache, 1, c.n_past, c.T, a.data());
  set_num_threads(2);
  attention_packed(shape, s.q.data(), pre, s.body.cache, 1, c.n_past, c.T, b.data());
  set_num_threads(nt);
  EXPECT_TRUE(bit_equal(a, b));
}

// The SIMD weighted sum's documented order (kv_simd.inc): per (head, lane) the rows are summed in
// ascending order whatever GB is, i.e. the result is exactly the fmaf chain
// acc = fmaf(p_j·s_j, l_jd, acc) from 0, times alpha. Bit-identical on every SIMD ISA over 301
// rows, every dynamic format (symmetric, asymmetric, 8 / 4 bits), full and partial column chunks
// (D = 64, 20) and a group of 8 + 3 heads. A kernel that reorders the rows (blocks of rows with
// partial sums added at the end, a split across threads) must change this test knowingly.
TEST(KvKernels, WeightedSumIsTheAscendingFmaChain) {
  IsaGuard guard;
  std::mt19937_64 rng(11);
  for (const FormatDesc& t : kKvFormats) {
    if (!t.dynamic()) continue;
    for (int D : {64, 20}) {
      const int G = 11;
      const int64_t n = 301;
      Filled f = fill(rng, t.format, 1, D, n, n);
      const KvRows r = f.cache.rows(1, true, 0);
      std::uniform_real_distribution<float> u(0.0f, 1.0f);
      std::vector<float> p0(size_t(G * n));
      for (float& x : p0) x = u(rng);
      std::vector<float> alpha(static_cast<size_t>(G));
      for (float& a : alpha) a = 0.5f + u(rng);
      std::vector<float> want(size_t(G * D));
      for (int i = 0; i < G; ++i)
        for (int d = 0; d < D; ++d) {
          float acc = 0.0f;
          for (int64_t j = 0; j < n; ++j) {
            const int l = detail::kv_code(r.codes + j * r.ld, d, r.bits) - detail::kv_zc(r, j);
            acc = std::fmaf(p0[size_t(i * n + j)] * r.scale[j * r.ls], float(l), acc);
          }
          want[size_t(i * D + d)] = alpha[size_t(i)] * acc;
        }
      for (Isa isa : all_isas()) {
        if (isa == Isa::Scalar) continue;  // the reference: p·s_j·l summed unfused, its own order
        std::vector<float> p = p0, got(size_t(G * D), NAN);
        detail::kv_table_for(isa).weighted_sum(p.data(), n, G, r, n, D, alpha.data(), got.data());
        EXPECT_TRUE(bit_equal(got, want)) << t.name << " D=" << D << " " << isa_name(isa);
      }
    }
  }
}

}  // namespace
}  // namespace sinkq::lowbit
