// KVQuant's packed KV store in a Forward (runtime/packed_kv.h CodebookKvStore) against the
// simulator's codec hooks (quant/kvquant.h): the same logits bit for bit for a prefill, within
// fp32 summation order for decode steps (the fused kernels), on every ISA; keys before and after
// RoPE, with rotation (R3 re-applied after decoding, or taken off q) and an fp prefix.
#include <gtest/gtest.h>

#include "kernels/cpu_features.h"
#include "kernels/kernel_test_util.h"
#include "quant/sim.h"
#include "runtime/packed_kv.h"
#include "util/model_testutil.h"
#include "util/testutil.h"

namespace sinkq::runtime {
namespace {

using testing::bit_equal;

constexpr auto samples = testing::prompts;

struct IsaRestore {
  Isa isa = active_isa();
  ~IsaRestore() { set_isa(isa); }
};

// Logits of `toks` fed as a prefill of `first` tokens, then one token at a time.
std::vector<float> run(Forward& f, const std::vector<int32_t>& toks, size_t first) {
  f.reset();
  std::vector<float> out;
  auto l = f.step(std::span(toks).subspan(0, first), true);
  out.assign(l.begin(), l.end());
  for (size_t i = first; i < toks.size(); ++i) {
    l = f.step(std::span(toks).subspan(i, 1), true);
    out.insert(out.end(), l.begin(), l.end());
  }
  return out;
}

void expect_packed_equals_sim(const quant::Recipe& cfg) {
  IsaRestore restore;
  const auto m = testing::stories260k();
  const quant::SimModel sm = quant::build_sim(m, cfg, samples(3, 48));
  ASSERT_FALSE(sm.kvq.empty());
  Forward fs(sm.model, 64);
  sm.attach(fs);
  quant::SimModel hooks_only = sm;  // the same model and hooks, the KV codecs left to the store
  hooks_only.kvq.clear();
  Forward fp(sm.model, 64);
  hooks_only.attach(fp);
  attach_codebook_kv(fp, CodebookKvScheme::from_sim(sm));
  EXPECT_EQ(fp.kv_store()->keys_before_rope(), cfg.kv.key_pre_rope);
  const std::vector<int32_t> toks = testing::prompt(40, 7);
  const size_t V = size_t(m->config().vocab_size);
  for (Isa isa : ktest::all_isas()) {
    set_isa(isa);
    const std::vector<float> a = run(fs, toks, 25), b = run(fp, toks, 25);
    // The prefill (25 tokens: the decode-to-fp32 path) is the simulator's bit for bit.
    const std::vector<float> a0(a.begin(), a.begin() + V), b0(b.begin(), b.begin() + V);
    EXPECT_TRUE(bit_equal(a0, b0)) << cfg.describe() << " max rel diff " << testing::rel_diff(a0, b0);
    // Decode steps (the fused kernels) differ from the fp32 attention by summation order: a
    // relative 1e-6 per attention output (tests/lowbit/codebook_attn_test.cc's bound at these
    // sizes), carried through 5 layers without a code flip at this seed; 1e-4 of the largest logit
    // leaves 100x margin and is far below one level flip (~1e-2).
    const double d = testing::rel_diff(a, b);
    std::printf("  %s on %s: decode steps' max|dlogit|/max|logit| %.3g\n", cfg.describe().c_str(),
                std::string(isa_name(isa)).c_str(), d);
    EXPECT_LE(d, 1e-4) << cfg.describe() << " " << isa_name(isa);
    // A second sequence in the same store (rows rewritten from 0), prefill only.
    EXPECT_TRUE(bit_equal(run(fs, testing::prompt(30, 3), 30), run(fp, testing::prompt(30, 3), 30)));
  }
  // 3-bit indices: a fraction of the fp32 cache's bytes.
  EXPECT_LT(fp.kv_bytes(), size_t(64 * m->config().num_layers * 2 * m->config().kv_dim() * 4) / 4);
}

quant::Recipe kvq(int bits, quant::KvCodebook cb, double outliers) {
  quant::Recipe c;
  c.kv.bits = bits;
  c.kv.codebook = cb;
  c.kv.outliers = outliers;
  return c;
}

TEST(CodebookKvStore, PreRopeKeysEqualTheSimulator) {
  expect_packed_equals_sim(kvq(3, quant::KvCodebook::Fisher, 0.01));
}

TEST(CodebookKvStore, PostRopeTokenKeysEqualTheSimulator) {
  quant::Recipe c = kvq(2, quant::KvCodebook::Nf, 0.05);
  c.kv.key_pre_rope = false;
  c.kv.key_axis = quant::KvAxis::Token;
  c.kv.value_axis = quant::KvAxis::Channel;
  expect_packed_equals_sim(c);
}

TEST(CodebookKvStore, RotatedModelBehindAPrefixEqualsTheSimulator) {
  quant::Recipe c = kvq(4, quant::KvCodebook::Kmeans, 0.01);
  c.kv.qnorm = true;
  c.rotate.on = true;
  c.prefix.tokens = {1};
  c.prefix.bos_id = 1;
  expect_packed_equals_sim(c);
}

TEST(CodebookKvStore, RefusesAnIntegerRecipe) {
  quant::SimModel sm = quant::build_sim(testing::stories260k(), quant::Recipe::from_preset("w4a8kv4"), {});
  EXPECT_NE(testing::error_of([&] { CodebookKvScheme::from_sim(sm); }).find("not a codebook"), std::string::npos);
}

}  // namespace
}  // namespace sinkq::runtime
