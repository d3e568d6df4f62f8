// SmolLM2-135M-Instruct from its Q4_1 GGUF file against ../shared/golden/smollm2-135m (transformers
// 5.24 float32, eager attention, on the same dequantized weights; README there): the GGUF path
// end to end — reader, dequantization, q/k un-permutation, config and tokenizer from metadata.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>

#include "core/mmap.h"
#include "eval/generate.h"
#include "eval/ppl.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"
#include "util/testutil.h"

namespace sinkq {
namespace {

using nlohmann::json;

std::string sd() { return testing::shared_dir(); }
std::string gguf_path() { return sd() + "/models/smollm2-135m-instruct-q4_1/model.gguf"; }
json golden(const std::string& file) { return json::parse(read_file(sd() + "/golden/smollm2-135m/" + file)); }

struct SmolLM2 {
  std::shared_ptr<const Model> model = Model::load(gguf_path());
  std::shared_ptr<const Tokenizer> tok = Tokenizer::load(gguf_path());
};
const SmolLM2& smol() {
  static const SmolLM2 s;
  return s;
}

// The README: fp32 vs fp64 of the reference differ by <= 9.8e-5 on these prompts, and it suggests
// 2e-4 for an fp32 engine with its own summation order (5e-4 with fused kernels). sinkq sums with
// OpenBLAS/its GEMV in another order than torch: its error against fp64 is of the same size as
// torch's (<= 1e-4), so the two fp32 results differ by <= 2e-4.
constexpr double kLogitAtol = 2e-4;

TEST(GoldenSmolLM2, ConfigFromGgufMetadata) {
  const ModelConfig& c = smol().model->config();
  EXPECT_EQ(c.hidden_size, 576);
  EXPECT_EQ(c.intermediate_size, 1536);
  EXPECT_EQ(c.num_layers, 30);
  EXPECT_EQ(c.num_heads, 9);
  EXPECT_EQ(c.num_kv_heads, 3);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.vocab_size, 49152);
  EXPECT_EQ(c.max_position_embeddings, 8192);
  EXPECT_FLOAT_EQ(c.rope_theta, 100000.0f);
  EXPECT_FLOAT_EQ(c.rms_norm_eps, 1e-5f);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.bos_token_id, 1);
  EXPECT_EQ(smol().model->weights().parameter_count(smol().model->config()), 134515008);  // README
  EXPECT_EQ(smol().tok->bos_id(), 1);
  EXPECT_EQ(smol().tok->eos_id(), 2);
  EXPECT_FALSE(smol().tok->add_bos());
}

// Every stored top-40 logit at every position, the logsumexp, the argmax, and all 49,152 logits of
// the last position.
TEST(GoldenSmolLM2, LogitsOfBothPrompts) {
  const json g = golden("logits.json");
  const int64_t V = smol().model->config().vocab_size;
  for (const json& p : g.at("prompts")) {
    const auto ids = p.at("input_ids").get<std::vector<int32_t>>();
    const std::string name = p.at("name").get<std::string>();
    // The tokenizer from the GGUF gives the reference's ids (the chat prompt through its template).
    if (!p.at("chat_template").get<bool>()) {
      EXPECT_EQ(smol().tok->encode(p.at("text").get<std::string>()), ids) << name;
    }
    Forward f(smol().model, int64_t(ids.size()));
    const auto logits = f.step(ids, /*all_logits=*/true);
    double worst = 0;
    for (size_t t = 0; t < ids.size(); ++t) {
      const json& pos = p.at("positions")[t];
      const float* row = logits.data() + t * size_t(V);
      for (const json& e : pos.at("top40")) {
        const double d = std::abs(double(row[e[0].get<int>()]) - e[1].get<double>());
        worst = std::max(worst, d);
        ASSERT_LE(d, kLogitAtol) << name << " position " << t << " id " << e[0];
      }
      double mx = -1e30, s = 0;
      for (int64_t i = 0; i < V; ++i) mx = std::max(mx, double(row[i]));
      for (int64_t i = 0; i < V; ++i) s += std::exp(double(row[i]) - mx);
      EXPECT_NEAR(mx + std::log(s), pos.at("logsumexp").get<double>(), kLogitAtol) << name << " position " << t;
      EXPECT_EQ(int(std::max_element(row, row + V) - row), pos.at("argmax").get<int>()) << name << " position " << t;
    }
    const auto last = p.at("last_logits_full").get<std::vector<float>>();
    ASSERT_EQ(int64_t(last.size()), V);
    const float* row = logits.data() + (ids.size() - 1) * size_t(V);
    for (int64_t i = 0; i < V; ++i) {
      const double d = std::abs(double(row[i]) - double(last[size_t(i)]));
      worst = std::max(worst, d);
      ASSERT_LE(d, kLogitAtol) << name << " last position, id " << i;
    }
    std::printf("%s: max |logit - golden| = %.3g\n", name.c_str(), worst);
  }
}

// Greedy continuations token for token, up to the first near tie. Logits within 2e-4 of the
// reference can flip a step only where the top-1/top-2 gap is < 4e-4; with a 5x margin, a gap under
// 2e-3 counts as a tie: `plain` has one at step 46 (gap 0.0014, README), so its first 46 tokens are
// compared and the rest not; every other step's gap is >= 0.013.
TEST(GoldenSmolLM2, GreedyContinuations) {
  const json g = golden("greedy.json");
  for (const json& c : g.at("cases")) {
    const std::string name = c.at("name").get<std::string>();
    const auto prompt = c.at("prompt_ids").get<std::vector<int32_t>>();
    if (!c.at("chat_template").get<bool>()) {
      EXPECT_EQ(smol().tok->encode(c.at("prompt").get<std::string>()), prompt) << name;
    }
    auto want = c.at("generated_ids").get<std::vector<int32_t>>();
    const auto& margins = c.at("top1_top2_margin");
    size_t strict = want.size();
    for (size_t i = 0; i < margins.size() && i < want.size(); ++i)
      if (margins[i].get<double>() < 10 * kLogitAtol) strict = std::min(strict, i);
    if (name == "plain") {
      EXPECT_EQ(strict, 46u);  // the README's near tie, found from the margins
    }
    Forward fwd(smol().model, int64_t(prompt.size() + want.size()));
    GenerateOptions o;
    o.max_new_tokens = int64_t(want.size());
    o.sampler.temperature = 0;
    // stop_ids stays empty: the reference loop does not stop at EOS.
    const GenerateResult r = generate(fwd, prompt, o);
    ASSERT_GE(r.generated.size(), strict) << name;
    want.resize(strict);
    EXPECT_EQ(std::vector<int32_t>(r.generated.begin(), r.generated.begin() + std::ptrdiff_t(strict)), want) << name;
  }
}

// WikiText-2, the `bos` protocol over the README's 8 windows of 512: the tokenizer's stream (all
// 304,986 tokens), the window ids, every window's mean NLL and the total. 1e-4 relative on ppl is the
// issue's bar; a 2e-4 logit difference moves a mean NLL by < 2e-4·2 (logsumexp and target), far
// below 1e-4 of ~3.4 nats.
TEST(GoldenSmolLM2, WikiText2BosProtocolEightWindows) {
  const json g = golden("ppl.json").at("wikitext2_test");
  EncodeOptions raw;
  raw.add_special = raw.parse_special = false;
  const auto toks = smol().tok->encode(read_text_file(sd() + "/data/wikitext-2/wikitext2_test_joined.txt"), raw);
  // The reference tokenizer is transformers' GGUF converter, which drops SmolLM2's Digits
  // pre-tokenizer step; sinkq keeps it, as the model's own tokenizer.json and llama.cpp do
  // (src/tokenizer/gguf_tokenizer.cc). The two streams differ only where whitespace runs end right
  // before a digit (" :\n\n\n 1": " \n\n\n" + " 1" vs " \n\n\n " + "1"): 8 places in this file.
  EXPECT_LE(std::abs(int64_t(toks.size()) - g.at("total_tokens_in_file").get<int64_t>()), 8);
  PplOptions o;
  o.ctx = 512, o.protocol = PplProtocol::Bos, o.max_windows = 8, o.bos_id = smol().tok->bos_id();
  const auto windows = ppl_windows(toks, o);
  ASSERT_EQ(windows.size(), 8u);
  for (size_t k = 0; k < 8; ++k)
    EXPECT_EQ(json(windows[k]), g.at("per_window")[k].at("ids")) << "window " << k;
  Forward fwd(smol().model, 512);
  const PplResult r = perplexity(fwd, toks, o);
  EXPECT_EQ(r.tokens_scored, g.at("predicted_tokens").get<int64_t>());
  for (size_t k = 0; k < 8; ++k) {
    const double want = g.at("per_window")[k].at("mean_nll_f32").get<double>();
    EXPECT_NEAR(r.window_nll[k], want, 1e-4 * want) << "window " << k;
  }
  const double want = g.at("ppl_f32").get<double>();
  EXPECT_NEAR(r.ppl, want, 1e-4 * want);
  std::printf("SmolLM2 WikiText-2 bos ctx 512 x 8: ppl %.6f (golden %.6f)\n", r.ppl, want);
}

}  // namespace
}  // namespace sinkq
