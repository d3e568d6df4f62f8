// The prefix protocol (eval/ppl.h) over a simulated model with a KV prefix (quant/sim.h
// SimModel::prefix): with nothing quantized and the prefix [BOS], the mean NLL equals the fp
// model run inline on [BOS] + window, scoring the same targets (the window's own next-token
// predictions); rotation keeps that; IntactKV (fp prefix) vs its off baseline (quantized prefix)
// score the same targets and differ.
#include <gtest/gtest.h>

#include <cmath>

#include "core/mmap.h"
#include "eval/ppl.h"
#include "quant/sim.h"
#include "tokenizer/tokenizer.h"
#include "util/testutil.h"

namespace sinkq {
namespace {

struct Data {
  std::shared_ptr<const Model> model = Model::load(testing::shared_dir() + "/models/stories260K");
  std::vector<int32_t> toks;
  Data() {
    const auto tok = Tokenizer::load(testing::shared_dir() + "/models/stories260K");
    EncodeOptions raw;
    raw.add_special = false;
    raw.parse_special = false;
    toks = tok->encode(read_text_file(testing::shared_dir() + "/golden/stories260K/tinystories_sample.txt"), raw);
  }
};

constexpr int64_t kCtx = 96;
constexpr int64_t kWindows = 3;

// The inline reference: mean NLL of the fp model on [BOS] + window, predictions of window tokens
// 1..ctx-1 from window positions 0..ctx-2 (what the prefix protocol scores).
double inline_nll(const Data& d) {
  Forward f(d.model, kCtx + 1);
  const int64_t V = d.model->config().vocab_size;
  double sum = 0;
  int64_t n = 0;
  for (int64_t k = 0; k < kWindows; ++k) {
    std::vector<int32_t> w{1};
    w.insert(w.end(), d.toks.begin() + k * kCtx, d.toks.begin() + (k + 1) * kCtx);
    f.reset();
    const auto logits = f.step(w, true);
    for (size_t p = 1; p + 1 < w.size(); ++p, ++n) sum += token_nll(logits.data() + p * size_t(V), V, w[p + 1]);
  }
  return sum / double(n);
}

PplResult prefix_ppl(const Data& d, const quant::Recipe& cfg) {
  const quant::SimModel sm = quant::build_sim(d.model, cfg, {});
  Forward f(sm.model, kCtx);
  sm.attach(f);
  PplOptions o;
  o.ctx = kCtx;
  o.protocol = PplProtocol::Prefix;
  o.max_windows = kWindows;
  return perplexity(f, d.toks, o);
}

quant::Recipe bos_cfg() {
  quant::Recipe c;
  c.prefix.spec = "bos";
  c.prefix.tokens = {1};
  c.prefix.bos_id = 1;
  return c;
}

// 1e-6 relative for the plain model: the prefix path changes only the fp32 summation order of
// attention (two segments added at the end, kernels/ops.h), far below 1e-6 of a mean NLL ≈ 1–3.
// 1e-4 with rotation: the rotated model equals the original to ≈ 1e-6 relative per matrix
// (rotate_test), which moves a mean NLL by well under 1e-4.
TEST(PrefixSimPpl, BosPrefixEqualsInlineBos) {
  const Data d;
  const double want = inline_nll(d);
  const PplResult r = prefix_ppl(d, bos_cfg());
  EXPECT_EQ(r.tokens_scored, kWindows * (kCtx - 1));
  EXPECT_NEAR(r.mean_nll, want, 1e-6 * want);
  quant::Recipe rot = bos_cfg();
  rot.rotate.on = true;
  rot.rotate.seed = 11;
  EXPECT_NEAR(prefix_ppl(d, rot).mean_nll, want, 1e-4 * want);
}

// IntactKV on (fp prefix KV) vs off (the W4A4KV4 model's own [BOS] rows): same targets, different
// NLL; the off baseline equals the quantized model run inline on [BOS] + window (1e-6 relative, as
// above: the same per-row quantizers on the same rows).
TEST(PrefixSimPpl, IntactKvOnAndOffScoreTheSameTargets) {
  const Data d;
  quant::Recipe c = bos_cfg();
  c.w.bits = 4;
  c.a.bits = 4;
  c.kv.bits = 4;
  const PplResult on = prefix_ppl(d, c);
  c.prefix.source = quant::PrefixSim::Source::Quant;
  const PplResult off = prefix_ppl(d, c);
  EXPECT_EQ(on.tokens_scored, off.tokens_scored);
  EXPECT_NE(on.mean_nll, off.mean_nll);
  // Inline quantized run.
  quant::Recipe plain = c;
  plain.prefix = quant::PrefixSim{};
  const quant::SimModel sm = quant::build_sim(d.model, plain, {});
  Forward f(sm.model, kCtx + 1);
  sm.attach(f);
  const int64_t V = d.model->config().vocab_size;
  double sum = 0;
  int64_t n = 0;
  for (int64_t k = 0; k < kWindows; ++k) {
    std::vector<int32_t> w{1};
    w.insert(w.end(), d.toks.begin() + k * kCtx, d.toks.begin() + (k + 1) * kCtx);
    f.reset();
    const auto logits = f.step(w, true);
    for (size_t p = 1; p + 1 < w.size(); ++p, ++n) sum += token_nll(logits.data() + p * size_t(V), V, w[p + 1]);
  }
  EXPECT_NEAR(off.mean_nll, sum / double(n), 1e-6 * off.mean_nll);
}

}  // namespace
}  // namespace sinkq
