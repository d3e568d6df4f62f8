// Perplexity and greedy generation against ../shared/golden (independent implementations).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>

#include "core/mmap.h"
#include "eval/generate.h"
#include "eval/ppl.h"
#include "tokenizer/tokenizer.h"
#include "util/testutil.h"

namespace sinkq {
namespace {

using nlohmann::json;

std::string sd() { return testing::shared_dir(); }
json load_json(const std::string& rel) { return json::parse(read_file(sd() + "/" + rel)); }

std::vector<int32_t> encode_raw(const Tokenizer& t, const std::string& text) {
  EncodeOptions o;
  o.add_special = o.parse_special = false;
  return t.encode(text, o);
}

// Relative 1e-4 on ppl is the bar; fp32 vs float64 logits differ by <= 1.4e-4 absolute
// (golden README), which moves a mean NLL of ~5 by far less than 1e-5 relative.
constexpr double kPplRtol = 1e-4;

// The model alone: golden window ids -> mean NLL, independent of the tokenizer.
TEST(GoldenPpl, Stories260KFromGoldenWindowIds) {
  const auto model = Model::load(sd() + "/models/stories260K");
  const json g = load_json("golden/stories260K/ppl.json");
  for (const char* corpus : {"wikitext2_test", "tinystories_sample"}) {
    const json& c = g.at(corpus);
    Forward fwd(model, 512);
    double total = 0;
    int64_t n = 0;
    for (const auto& w : c.at("window_ids")) {
      const auto ids = w.get<std::vector<int32_t>>();
      fwd.reset();
      const auto logits = fwd.step(ids, true);
      for (size_t p = 0; p + 1 < ids.size(); ++p, ++n) total += token_nll(logits.data() + p * 512, 512, ids[p + 1]);
    }
    EXPECT_EQ(n, c.at("predicted_tokens").get<int64_t>());
    EXPECT_NEAR(total / double(n), c.at("mean_nll").get<double>(), kPplRtol * c.at("mean_nll").get<double>()) << corpus;
  }
}

// The whole pipeline, as `sinkq ppl --protocol bos` runs it: file -> tokens -> windows -> ppl.
TEST(GoldenPpl, Stories260KWholePipeline) {
  const auto model = Model::load(sd() + "/models/stories260K");
  const auto tok = Tokenizer::load(sd() + "/models/stories260K");
  const json g = load_json("golden/stories260K/ppl.json");
  const std::pair<const char*, std::string> corpora[] = {
      {"wikitext2_test", sd() + "/data/wikitext-2/wikitext2_test_joined.txt"},
      {"tinystories_sample", sd() + "/golden/stories260K/tinystories_sample.txt"}};
  for (const auto& [name, path] : corpora) {
    const json& c = g.at(name);
    const auto toks = encode_raw(*tok, read_text_file(path));
    EXPECT_EQ(int64_t(toks.size()), c.at("total_tokens_in_file").get<int64_t>()) << name;
    PplOptions o;
    o.ctx = 512, o.protocol = PplProtocol::Bos, o.max_windows = 4, o.bos_id = tok->bos_id();
    EXPECT_EQ(json(ppl_windows(toks, o)), c.at("window_ids")) << name;
    Forward fwd(model, 512);
    const PplResult r = perplexity(fwd, toks, o);
    EXPECT_EQ(r.tokens_scored, 2044);
    EXPECT_NEAR(r.ppl, c.at("ppl").get<double>(), kPplRtol * c.at("ppl").get<double>()) << name;
    for (size_t k = 0; k < 4; ++k)
      EXPECT_NEAR(r.window_nll[k], c.at("per_window_mean_nll")[k].get<double>(), 1e-4) << name << " window " << k;
  }
}

TEST(GoldenPpl, Mixtext25MBosCtx256) {
  const auto model = Model::load(sd() + "/models/mixtext-2.5M");
  const auto tok = Tokenizer::load(sd() + "/models/mixtext-2.5M");
  const json g = load_json("golden/mixtext-2.5M/ppl.json");
  for (const char* name : {"wikitext2_test", "tinystories_sample"}) {
    const json& c = g.at(name);
    const auto toks = encode_raw(*tok, read_text_file(sd() + "/" + c.at("file").get<std::string>()));
    PplOptions o;
    o.ctx = 256, o.protocol = PplProtocol::Bos, o.max_windows = 4, o.bos_id = tok->bos_id();
    Forward fwd(model, 256);
    const PplResult r = perplexity(fwd, toks, o);
    EXPECT_EQ(r.tokens_scored, c.at("tokens_scored").get<int64_t>());
    EXPECT_NEAR(r.ppl, c.at("ppl").get<double>(), kPplRtol * c.at("ppl").get<double>()) << name;
  }
}

// Greedy continuations must be identical token for token (the golden README gives the smallest
// top-1/top-2 logit margin on these paths: >= 0.0177, far above fp32 noise).
void expect_greedy(const std::string& model_name) {
  const auto model = Model::load(sd() + "/models/" + model_name);
  const auto tok = Tokenizer::load(sd() + "/models/" + model_name);
  const json g = load_json("golden/" + model_name + "/greedy.json");
  for (const auto& c : g.at("cases")) {
    const auto prompt_ids = tok->encode(c.at("prompt").get<std::string>());
    EXPECT_EQ(json(prompt_ids), c.at("prompt_ids")) << c.at("prompt");
    const auto want = c.at("generated_ids").get<std::vector<int32_t>>();
    Forward fwd(model, int64_t(prompt_ids.size() + want.size()));
    GenerateOptions o;
    o.max_new_tokens = int64_t(want.size());
    o.sampler.temperature = 0;
    const GenerateResult r = generate(fwd, prompt_ids, o);
    EXPECT_EQ(r.generated, want) << model_name << ": " << c.at("prompt");
  }
}

TEST(GoldenGreedy, Stories260K) { expect_greedy("stories260K"); }
TEST(GoldenGreedy, Mixtext25M) { expect_greedy("mixtext-2.5M"); }

TEST(Ppl, GptqProtocolWindows) {
  std::vector<int32_t> toks(20);
  for (int i = 0; i < 20; ++i) toks[size_t(i)] = 100 + i;
  PplOptions o;
  o.ctx = 8, o.protocol = PplProtocol::Gptq, o.bos_id = 1, o.add_bos = true;
  const auto w = ppl_windows(toks, o);  // stream of 21 = [1] + toks -> 2 complete windows of 8
  ASSERT_EQ(w.size(), 2u);
  EXPECT_EQ(w[0], (std::vector<int32_t>{1, 100, 101, 102, 103, 104, 105, 106}));
  EXPECT_EQ(w[1], (std::vector<int32_t>{107, 108, 109, 110, 111, 112, 113, 114}));
  o.protocol = PplProtocol::Bos;  // 20 / 7 -> 2 windows, each BOS + 7
  const auto b = ppl_windows(toks, o);
  ASSERT_EQ(b.size(), 2u);
  EXPECT_EQ(b[1], (std::vector<int32_t>{1, 107, 108, 109, 110, 111, 112, 113}));
  o.max_windows = 1;
  EXPECT_EQ(ppl_windows(toks, o).size(), 1u);
  EXPECT_THROW(parse_ppl_protocol("wiki"), Error);
  // llamacpp: llama-perplexity's chunk k of [BOS] + toks (8 tokens from toks[8k - 1]) with its first
  // token replaced by BOS; 20 tokens -> chunks at 0 and 8 (the third would need toks[16..23)).
  o.protocol = PplProtocol::LlamaCpp;
  o.max_windows = 0;
  const auto l = ppl_windows(toks, o);
  ASSERT_EQ(l.size(), 2u);
  EXPECT_EQ(l[0], (std::vector<int32_t>{1, 100, 101, 102, 103, 104, 105, 106}));
  EXPECT_EQ(l[1], (std::vector<int32_t>{1, 108, 109, 110, 111, 112, 113, 114}));
  EXPECT_EQ(ppl_first_scored(o), 4);
  EXPECT_EQ(parse_ppl_protocol("llamacpp"), PplProtocol::LlamaCpp);
  o.add_bos = false;  // a tokenizer without BOS (SmolLM2): llama.cpp's plain chunks of the text
  const auto plain = ppl_windows(toks, o);
  ASSERT_EQ(plain.size(), 2u);
  EXPECT_EQ(plain[1], (std::vector<int32_t>{108, 109, 110, 111, 112, 113, 114, 115}));
}

// llamacpp scores only each window's second half: its NLL is the mean over positions ctx/2 ..
// ctx-2 of the same logits the bos-style window gives (exactly: the same forward, the same sums).
TEST(Ppl, LlamaCppProtocolScoresTheSecondHalf) {
  const auto model = Model::load(testing::shared_dir() + "/models/stories260K");
  std::vector<int32_t> toks(70);
  for (int i = 0; i < 70; ++i) toks[size_t(i)] = 3 + (37 * i) % 500;
  PplOptions o;
  o.ctx = 16, o.protocol = PplProtocol::LlamaCpp, o.bos_id = 1;
  Forward f(model, 16);
  const PplResult r = perplexity(f, toks, o);
  ASSERT_EQ(r.windows, 4);  // chunks at 0, 16, 32, 48 (+15 <= 70)
  EXPECT_EQ(r.tokens_scored, 4 * (16 - 1 - 8));
  const auto windows = ppl_windows(toks, o);
  const int64_t V = model->config().vocab_size;
  for (size_t k = 0; k < windows.size(); ++k) {
    f.reset();
    const auto logits = f.step(windows[k], true);
    double sum = 0;
    for (size_t p = 8; p + 1 < windows[k].size(); ++p)
      sum += token_nll(logits.data() + p * size_t(V), V, windows[k][p + 1]);
    EXPECT_EQ(r.window_nll[k], sum / 7.0) << "window " << k;
  }
}

// prefix protocol: the text alone (no BOS: the prefix carries it) cut into ctx windows.
TEST(Ppl, PrefixProtocolWindows) {
  std::vector<int32_t> toks(20);
  for (int i = 0; i < 20; ++i) toks[size_t(i)] = 100 + i;
  PplOptions o;
  o.ctx = 8, o.protocol = PplProtocol::Prefix, o.bos_id = 1, o.add_bos = true;
  const auto w = ppl_windows(toks, o);
  ASSERT_EQ(w.size(), 2u);
  EXPECT_EQ(w[0], (std::vector<int32_t>{100, 101, 102, 103, 104, 105, 106, 107}));
  EXPECT_EQ(w[1], (std::vector<int32_t>{108, 109, 110, 111, 112, 113, 114, 115}));
  EXPECT_EQ(parse_ppl_protocol("prefix"), PplProtocol::Prefix);
}

// Perplexity under the prefix protocol = scoring the same targets with the prefix fed inline in
// front of each window (prefix rows not scored, nor the window's first token). The two runs
// differ by attention summation order only: NLLs agree to ~1e-5 relative (fp32 logits error
// <= 1e-4 absolute, see tests/model/prefix_test.cc, moves a mean NLL of ~3 by far less).
TEST(Ppl, PrefixProtocolEqualsInlinePrefix) {
  const auto model = Model::load(sd() + "/models/mixtext-2.5M");
  const auto tok = Tokenizer::load(sd() + "/models/mixtext-2.5M");
  EncodeOptions raw;
  raw.add_special = false;
  const std::vector<int32_t> toks = tok->encode("Once upon a time, there was a little girl named Lily. She liked to play "
                                                "outside with her dog. One day they went to the park and saw a big tree.",
                                                raw);
  const std::vector<int32_t> prefix{1, 13};  // [BOS] and a newline
  PplOptions o;
  o.ctx = 16, o.protocol = PplProtocol::Prefix, o.bos_id = 1;
  Forward fwd(model, 16);
  fwd.set_prefix(KvPrefix::compute(model, prefix));
  const PplResult r = perplexity(fwd, toks, o);
  const auto windows = ppl_windows(toks, o);
  ASSERT_GE(windows.size(), 2u);
  Forward inline_fwd(model, 32);
  double total = 0;
  int64_t n = 0;
  const size_t V = size_t(model->config().vocab_size), P = prefix.size();
  for (const auto& w : windows) {
    std::vector<int32_t> seq = prefix;
    seq.insert(seq.end(), w.begin(), w.end());
    inline_fwd.reset();
    const auto logits = inline_fwd.step(seq, true);
    for (size_t p = P; p + 1 < seq.size(); ++p, ++n) total += token_nll(logits.data() + p * V, int64_t(V), seq[p + 1]);
  }
  EXPECT_EQ(r.tokens_scored, n);
  EXPECT_NEAR(r.mean_nll, total / double(n), 1e-5 * (total / double(n)));
  // A prefix with another protocol, or the prefix protocol without one, is refused.
  o.protocol = PplProtocol::Gptq;
  EXPECT_NE(testing::error_of([&] { perplexity(fwd, toks, o); }).find("--protocol prefix"), std::string::npos);
  o.protocol = PplProtocol::Prefix;
  Forward bare(model, 16);
  EXPECT_NE(testing::error_of([&] { perplexity(bare, toks, o); }).find("needs a KV prefix"), std::string::npos);
}

TEST(Ppl, TooShortTextIsAnError) {
  const auto model = Model::load(sd() + "/models/stories260K");
  Forward fwd(model, 64);
  PplOptions o;
  o.ctx = 64, o.bos_id = 1;
  EXPECT_THROW(perplexity(fwd, std::vector<int32_t>(10, 300), o), Error);
  o.ctx = 128;  // longer than the forward's context
  EXPECT_THROW(perplexity(fwd, std::vector<int32_t>(1000, 300), o), Error);
}

// token_nll is -log softmax: exp(-nll) over all targets sums to 1.
TEST(Ppl, TokenNllIsNormalised) {
  std::vector<float> logits{3.0f, -1.0f, 0.5f, 20.0f, -7.0f};
  double s = 0;
  for (int i = 0; i < 5; ++i) s += std::exp(-token_nll(logits.data(), 5, i));
  EXPECT_NEAR(s, 1.0, 1e-12);
}

}  // namespace
}  // namespace sinkq
