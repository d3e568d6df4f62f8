// tests/lowbit/codebook_attn_test.cc — the fused codebook-KV attention kernels (codebook_kv.h
// attention_codebook) on every ISA against the double oracle over the cache's decoded values,
// and the oracle against fp32 attention over the dequantized (= simulated) cache.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "formats/nuq.h"
#include "kernels/cpu_features.h"
#include "kernels/kernel_test_util.h"
#include "kernels/ops.h"
#include "lowbit/codebook_kv.h"
#include "lowbit/codebook_testutil.h"

namespace sinkq::lowbit {
namespace {

using ktest::all_isas;
using cbtest::Case;
using cbtest::Scene;
using cbtest::cases;
using cbtest::check;
using cbtest::make;

TEST(CodebookAttention, EveryIsaMatchesOracle) {
  ktest::StateGuard guard;
  std::mt19937_64 rng(5);
  int n = 0;
  int64_t outliers = 0, two_bases = 0;
  for (const Case& c : cases()) {
    const Scene s = make(rng, c);
    two_bases += !s.qb.empty();
    outliers += s.cache.outliers(1, false) + s.cache.outliers(1, true);
    const AttnShape shape{c.H, c.Hkv, c.D, c.window};
    const KvSegment pre{s.pk.data(), s.pv.data(), c.P};
    const float* cs = c.rope ? s.cs.data() + c.P * c.D : nullptr;  // body row 0's RoPE row
    std::vector<float> ref(s.q.size(), NAN);
    ref::attention_codebook(shape, s.q.data(), s.q_body(), pre, s.cache, 1, c.n_past, c.T, cs, ref.data());
    for (Isa isa : all_isas()) {
      set_isa(isa);
      for (int threads : {1, 2}) {
        set_num_threads(threads);
        std::vector<float> got(s.q.size(), NAN);
        attention_codebook(shape, s.q.data(), s.q_body(), pre, s.cache, 1, c.n_past, c.T, cs, got.data());
        check(c, s, got, ref, std::string(isa_name(isa)) + " threads " + std::to_string(threads));
        ++n;
      }
    }
  }
  EXPECT_GE(n, 2 * 42);
  EXPECT_GT(outliers, 100);  // the sparse paths ran
  EXPECT_GE(two_bases, 4);
}

// The oracle against the fp32 attention of kernels/ops.h over [prefix; dequantized body, rotated
// by rope_apply_cs] — what the simulator and the prefill path compute: the same values (the
// dequantized body is the oracle's, and RoPE in fp32 rounds each key within the bound's γ_{D+4}).
TEST(CodebookAttention, OracleMatchesFp32AttentionOverDequantizedCache) {
  std::mt19937_64 rng(6);
  for (const Case& c : cases()) {
    Scene s = make(rng, c);
    s.qb.clear();  // one basis: the fp32 kernel takes one q
    const AttnShape shape{c.H, c.Hkv, c.D, c.window};
    const KvSegment pre{s.pk.data(), s.pv.data(), c.P};
    const int64_t C = int64_t(c.Hkv) * c.D, nb = c.n_past + c.T;
    std::vector<float> kb(size_t(nb * C)), vb(kb.size());
    s.cache.dequantize(1, false, nb, kb.data());
    s.cache.dequantize(1, true, nb, vb.data());
    if (c.rope) rope_apply_cs(s.cs.data() + c.P * c.D, c.D, kb.data(), nb, c.Hkv);
    std::vector<float> oracle(s.q.size(), NAN), fp(s.q.size(), NAN);
    ref::attention_codebook(shape, s.q.data(), nullptr, pre, s.cache, 1, c.n_past, c.T, c.rope ? s.cs.data() + c.P * c.D : nullptr,
                            oracle.data());
    sinkq::attention(shape, s.q.data(), pre, kb.data(), vb.data(), c.n_past, c.T, fp.data());
    check(c, s, fp, oracle, "fp32 over dequantized");
  }
}

TEST(CodebookAttention, BadCallsAreErrors) {
  std::mt19937_64 rng(7);
  const Case c{4, 2, 8, 0, 0, 3, 1, 3, true, false, true, 0.0};
  const Scene s = make(rng, c);
  const KvSegment pre{nullptr, nullptr, 0};
  std::vector<float> out(s.q.size());
  // More rows than written, a shape that is not the cache's, a head slice that is not whole bytes.
  EXPECT_THROW(attention_codebook({4, 2, 8, 0}, s.q.data(), nullptr, pre, s.cache, 1, 3, 2, nullptr, out.data()), Error);
  EXPECT_THROW(attention_codebook({4, 1, 8, 0}, s.q.data(), nullptr, pre, s.cache, 1, 3, 1, nullptr, out.data()), Error);
  EXPECT_THROW(s.cache.rows(1, false, 0, 6), Error);  // 6 channels x 3 bits = 18 bits
}

}  // namespace
}  // namespace sinkq::lowbit
