// tests/cuda/codebook_math_test.cc — the device's decode of a codebook (nuqX) KV row (cuda/
// codebook_math.h, as attention_kernels.cu's attn_partial_cb runs it: every column's dense value,
// then the row's outliers of the head patched in), replayed on the host over real
// lowbit::CodebookKvCache layers, held to lowbit::detail::cb_value bit for bit: 2 / 3 / 4 bits,
// keys and values per channel or per token, with and without 5% outliers, every kv head. The
// device test (tests/cuda/device/attention_device_test.cc) runs the kernel itself.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "cuda/codebook_math.h"
#include "lowbit/codebook_testutil.h"

namespace sinkq::cuda {
namespace {

// Head 0's CPU view as the device holds the layer (cuda/attention.cc attention_codebook).
detail::CbBodyDev device_view(const lowbit::CbRows& r) {
  detail::CbBodyDev d;
  d.codes = r.codes, d.ld = r.ld, d.bits = r.bits, d.levels = r.levels;
  d.ch_scale = r.ch_scale, d.ch_zero = r.ch_zero, d.row_sz = r.row_sz;
  d.row_ptr = r.row_ptr, d.col = r.col, d.val = r.val;
  return d;
}

uint32_t bits_of(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

TEST(CudaCodebookMath, DecodedRowsAreCbValueBitForBit) {
  std::mt19937_64 rng(21);
  int64_t patched = 0, checked = 0;
  for (const lowbit::cbtest::Case& c : lowbit::cbtest::cases()) {
    const lowbit::cbtest::Scene s = lowbit::cbtest::make(rng, c);
    const int64_t rows = s.cache.rows_written(1);
    for (const bool value : {false, true}) {
      const detail::CbBodyDev body = device_view(s.cache.rows(1, value, 0, c.D));
      for (int g = 0; g < c.Hkv; ++g) {
        const lowbit::CbRows r = s.cache.rows(1, value, g, c.D);
        std::vector<float> buf(static_cast<size_t>(c.D));
        for (int64_t b = 0; b < rows; ++b) {
          for (int d = 0; d < c.D; ++d) buf[size_t(d)] = math::cb_dense(body, g, c.D, b, d);
          for (uint32_t e = body.row_ptr[b]; e < body.row_ptr[b + 1]; ++e) {
            const int col = math::cb_outlier_col(body, e, g, c.D);
            if (col >= 0) buf[size_t(col)] = math::cb_outlier_value(body, e), ++patched;
          }
          for (int d = 0; d < c.D; ++d, ++checked)
            ASSERT_EQ(bits_of(buf[size_t(d)]), bits_of(lowbit::detail::cb_value(r, b, d)))
                << (value ? "V" : "K") << " head " << g << " row " << b << " col " << d << " bits " << c.bits;
        }
      }
    }
  }
  EXPECT_GT(patched, 100);  // the outlier path ran
  EXPECT_GT(checked, 10000);
}

}  // namespace
}  // namespace sinkq::cuda
