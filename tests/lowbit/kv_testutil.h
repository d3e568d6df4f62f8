// tests/lowbit/kv_testutil.h — K-like rows for the KV cache tests (kv_test.cc, codebook_attn_test.cc).
#pragma once

#include <cstdint>
#include <random>
#include <vector>

namespace sinkq::lowbit::kvtest {

// Rows [n, kv_heads·D] of normal values with outlier channels (a K-like feature: every 7th column
// ×6), shifted per head so that asymmetric zero points are not all mid-range.
inline std::vector<float> kv_data(std::mt19937_64& rng, int64_t n, int kv_heads, int D) {
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(size_t(n * kv_heads * D));
  for (int64_t i = 0; i < n; ++i)
    for (int h = 0; h < kv_heads; ++h)
      for (int j = 0; j < D; ++j) {
        float x = d(rng) + 0.7f * float(h);
        if (j % 7 == 3) x *= 6.0f;
        v[size_t((i * kv_heads + h) * D + j)] = x;
      }
  return v;
}

}  // namespace sinkq::lowbit::kvtest
