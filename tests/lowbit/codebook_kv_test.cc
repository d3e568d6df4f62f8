// KVQuant's packed KV body (lowbit/codebook_kv.h) against its scalar reference, nuq::Codec::apply.
#include "lowbit/codebook_kv.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "core/error.h"
#include "util/testutil.h"

namespace sinkq::lowbit {
namespace {

namespace nuq = formats::nuq;

std::vector<float> heavy_tailed(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::student_t_distribution<float> t(3.0f);
  std::vector<float> x(static_cast<size_t>(n));
  for (float& v : x) v = t(rng);
  return x;
}

nuq::Codec codec(int bits, bool per_channel, double outliers, int64_t kv_dim, const std::vector<float>& calib) {
  nuq::Codec c;
  c.per_channel = per_channel;
  c.outliers = outliers;
  c.levels = bits == 3 ? nuq::nf_levels(3) : nuq::uniform_levels(bits);
  if (per_channel) {
    const int64_t rows = int64_t(calib.size()) / kv_dim;
    for (int64_t j = 0; j < kv_dim; ++j) {
      const nuq::Range r = nuq::outlier_range(calib.data() + j, rows, kv_dim, outliers);
      c.lo.push_back(r.lo);
      c.hi.push_back(r.hi);
    }
  }
  return c;
}

TEST(CodebookKv, DecodesToTheReferenceBitForBit) {
  const int64_t KV = 24, cap = 40;
  for (int bits : {2, 3, 4})
    for (bool chan : {false, true})
      for (double p : {0.0, 0.1}) {
        const std::vector<float> calib = heavy_tailed(200 * KV, 1);
        const nuq::Codec ck = codec(bits, chan, p, KV, calib), cv = codec(bits, !chan, p, KV, calib);
        CodebookKvCache cache(2, KV, cap, {ck, ck}, {cv, cv});
        EXPECT_EQ(cache.bits(), bits);
        const std::vector<float> k = heavy_tailed(cap * KV, 2 + bits), v = heavy_tailed(cap * KV, 9 + bits);
        // Appended in chunks of 7, 1, 1, ... as prefill then decode would.
        int64_t r = 0;
        for (int64_t T : {7, 1, 1, 13, 18}) {
          cache.store(1, r, k.data() + r * KV, v.data() + r * KV, T);
          r += T;
        }
        std::vector<float> rk = k, rv = v;
        const nuq::Codec::Count nk = ck.apply(rk.data(), cap, KV), nv = cv.apply(rv.data(), cap, KV);
        std::vector<float> dk(size_t(cap * KV)), dv(size_t(cap * KV));
        cache.dequantize(1, false, cap, dk.data());
        cache.dequantize(1, true, cap, dv.data());
        EXPECT_TRUE(testing::bit_equal(dk, rk)) << bits << chan << p;
        EXPECT_TRUE(testing::bit_equal(dv, rv)) << bits << chan << p;
        EXPECT_EQ(cache.outliers(1, false), nk.outliers);
        EXPECT_EQ(cache.outliers(1, true), nv.outliers);
        if (p > 0) {
          EXPECT_GT(nk.outliers + nv.outliers, 0);
        }
      }
}

TEST(CodebookKv, RewritingDropsLaterRowsAndBytesAreCounted) {
  const int64_t KV = 16, cap = 10;
  const std::vector<float> calib = heavy_tailed(100 * KV, 3);
  const nuq::Codec c = codec(4, false, 0.25, KV, calib);  // 2 outliers per side of 16
  CodebookKvCache cache(1, KV, cap, {c}, {c});
  const std::vector<float> x = heavy_tailed(cap * KV, 4);
  cache.store(0, 0, x.data(), x.data(), cap);
  EXPECT_EQ(cache.outliers(0, false), 4 * cap);
  const size_t full = cache.bytes();
  // codes 8 B + range 8 B per row, row_ptr 4 B per row (+1), outliers 4 B each, the kernels' code
  // slack and the 16-entry level table; for K and V.
  EXPECT_EQ(full, size_t(2 * (cap * 8 + cap * 8 + (cap + 1) * 4 + 4 * cap * 4 + detail::kCodeSlack + 16 * 4)));
  // A new sequence from row 3: rows 3.. are replaced, their outliers dropped first.
  const std::vector<float> y = heavy_tailed(2 * KV, 5);
  cache.store(0, 3, y.data(), y.data(), 2);
  EXPECT_EQ(cache.outliers(0, false), 4 * 5);
  std::vector<float> d(size_t(5 * KV)), want(x.begin(), x.begin() + 3 * KV);
  want.insert(want.end(), y.begin(), y.end());
  c.apply(want.data(), 5, KV);
  cache.dequantize(0, false, 5, d.data());
  EXPECT_TRUE(testing::bit_equal(d, want));
  EXPECT_THROW(cache.dequantize(0, false, 6, d.data()), Error);  // only 5 rows are held now
  EXPECT_NE(testing::error_of([&] { cache.store(0, 7, y.data(), y.data(), 1); }).find("appended in order"),
            std::string::npos);
  std::vector<float> nan_row(size_t(KV), 0.0f);
  nan_row[3] = std::nanf("");
  EXPECT_NE(testing::error_of([&] { cache.store(0, 5, nan_row.data(), nan_row.data(), 1); }).find("non-finite"),
            std::string::npos);
  nuq::Codec five = c;
  five.levels = nuq::uniform_levels(5);
  EXPECT_NE(testing::error_of([&] { CodebookKvCache(1, KV, cap, {five}, {five}); }).find("2, 3 or 4 bits"),
            std::string::npos);
}

}  // namespace
}  // namespace sinkq::lowbit
