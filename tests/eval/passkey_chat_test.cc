// Passkey retrieval (src/eval/passkey.h) and the chat-quality proxy (src/eval/chat_proxy.h): the
// prompts are built as documented, SmolLM2 retrieves a key it can see, and the proxy's KLD / top-1
// are the definition at the response positions, 0 / 1 against itself, with or without the prefix
// standing for the system part.
#include <gtest/gtest.h>

#include <cmath>

#include "calib/prefix.h"
#include "eval/chat_proxy.h"
#include "eval/passkey.h"
#include "eval/ppl.h"
#include "model/kv_prefix.h"
#include "quant/sim.h"
#include "tokenizer/tokenizer.h"
#include "util/testutil.h"

namespace sinkq {
namespace {

using testing::error_of;

std::string smollm2() { return testing::shared_dir() + "/models/smollm2-135m-instruct-q4_1/model.gguf"; }

TEST(Passkey, PromptLengthAndDepth) {
  const auto tok = Tokenizer::load(smollm2());
  const EncodeOptions raw{.add_special = false, .parse_special = false};
  const int64_t filler =
      int64_t(tok->encode(" The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again.", raw)
                  .size());
  const int64_t question = int64_t(tok->encode(" What is the pass key? The pass key is", raw).size());
  const std::vector<int32_t> key_sentence = tok->encode(" The pass key is 31415. Remember it. 31415 is the pass key.", raw);
  for (int64_t L : {200, 777, 2048}) {
    int64_t prev = -1;
    for (double d : {0.0, 0.25, 0.5, 1.0}) {
      const PasskeyPrompt p = passkey_prompt(*tok, false, L, d, "31415");
      // As close to L as whole fillers allow, never over.
      EXPECT_LE(int64_t(p.tokens.size()), L);
      EXPECT_GT(int64_t(p.tokens.size()), L - filler);
      // The key sentence sits where the index says, deeper for a larger depth.
      EXPECT_TRUE(std::equal(key_sentence.begin(), key_sentence.end(), p.tokens.begin() + p.key_token));
      EXPECT_GT(p.key_token, prev);
      prev = p.key_token;
      if (d == 1.0) {
        EXPECT_EQ(p.key_token + int64_t(key_sentence.size()) + question, int64_t(p.tokens.size()));
      }
    }
  }
  EXPECT_NE(error_of([&] { passkey_prompt(*tok, false, 40, 0.5, "31415"); }).find("needs at least"), std::string::npos);
  EXPECT_NE(error_of([&] { passkey_prompt(*tok, false, 400, 1.5, "31415"); }).find("[0, 1]"), std::string::npos);
}

// SmolLM2 reads back a key at the start of a 256-token prompt (measured: every key at depths 0
// and 0.5 up to 1,024 tokens); a broken prompt or decode would not.
TEST(Passkey, SmolLM2RetrievesAVisibleKey) {
  const auto m = Model::load(smollm2());
  const auto tok = Tokenizer::load(smollm2());
  Forward f(m, 300);
  PasskeyOptions o;
  o.lengths = {256};
  o.depths = {0.0};
  o.trials = 2;
  o.stop_ids = {tok->eos_id()};
  const PasskeyResult r = run_passkey(f, *tok, o);
  ASSERT_EQ(r.cells.size(), 1u);
  EXPECT_EQ(r.cells[0].correct, 2) << r.to_json().dump();
  EXPECT_EQ(r.accuracy, 1.0);
  EXPECT_EQ(r.cells[0].keys.size(), 2u);
  EXPECT_NE(r.cells[0].keys[0], r.cells[0].keys[1]);
  o.lengths = {400};
  EXPECT_NE(error_of([&] { run_passkey(f, *tok, o); }).find("does not fit"), std::string::npos);
}

TEST(ChatProxy, SamplesFromDocumentsWithTheSystemPartFirst) {
  const auto tok = Tokenizer::load(smollm2());
  ChatProxyOptions o;
  o.data = testing::shared_dir() + "/data/c4/c4_train_00000_first1000.jsonl";
  o.conversations = 3;
  o.response_tokens = 40;
  const std::vector<ChatSample> s = chat_samples(*tok, o);
  ASSERT_EQ(s.size(), 3u);
  // The system part is exactly what --prefix system:TEXT puts in the prefix.
  const std::vector<int32_t> sys = prefix_tokens(parse_prefix_spec("system:" + o.system), *tok, smollm2());
  for (const ChatSample& c : s) {
    EXPECT_EQ(std::vector<int32_t>(c.tokens.begin(), c.tokens.begin() + c.system_tokens), sys);
    EXPECT_EQ(int64_t(c.tokens.size()) - c.response_begin, 40);
    // The assistant header comes right before the response.
    const std::vector<int32_t> header = tok->encode("<|im_start|>assistant\n", {.add_special = false, .parse_special = true});
    EXPECT_TRUE(std::equal(header.begin(), header.end(), c.tokens.begin() + c.response_begin - int64_t(header.size())));
  }
  EXPECT_NE(s[0].tokens, s[1].tokens);
  o.conversations = 5000;
  EXPECT_NE(error_of([&] { chat_samples(*tok, o); }).find("long enough"), std::string::npos);
}

// On stories260K (no chat template: samples made by hand): the proxy's KLD and top-1 are the
// definition over the response positions of one full-sequence run of each model; the model
// against itself gives exactly 0 and 1, also with a prefix standing for the first tokens.
TEST(ChatProxy, KldAndTop1AreTheDefinitionAtTheResponse) {
  const std::string dir = testing::shared_dir() + "/models/stories260K";
  const auto m = Model::load(dir);
  const auto tok = Tokenizer::load(dir);
  const EncodeOptions raw{.add_special = false, .parse_special = false};
  ChatSample s;
  s.tokens = tok->encode("Once upon a time there was a girl. She liked to play in the park with her dog.", raw);
  s.tokens.insert(s.tokens.begin(), tok->bos_id());
  s.system_tokens = 3;
  s.response_begin = 10;
  const std::shared_ptr<const Model> q = quant::fake_quantize_weights(m, quant::Recipe::from_preset("w4a16"));
  Forward fq(q, 64), fr(m, 64);
  const ChatProxyResult r = run_chat_proxy(fq, fr, {}, {s});
  EXPECT_EQ(r.tokens, int64_t(s.tokens.size()) - 10);
  EXPECT_EQ(r.prefix_tokens_taken, 0);
  // The definition, from one step over the whole sequence (positions 9.. predict the response).
  const int64_t V = m->config().vocab_size, n = int64_t(s.tokens.size());
  fq.reset();
  const auto lq = fq.step(s.tokens, true);
  const std::vector<float> qa(lq.begin(), lq.end());
  fr.reset();
  const auto lr = fr.step(s.tokens, true);
  double kld = 0, top1 = 0;
  for (int64_t j = 9; j < n - 1; ++j) {
    const float* p = lr.data() + j * V;
    const float* qq = qa.data() + j * V;
    kld += token_kld(p, qq, V);
    top1 += (std::max_element(p, p + V) - p) == (std::max_element(qq, qq + V) - qq);
  }
  // Different chunking (prompt, then response) than one step: fp32 summation order, ~1e-6 of the
  // O(1) per-token KL here.
  EXPECT_NEAR(r.kld, kld / double(n - 10), 1e-4);
  EXPECT_NEAR(r.top1, top1 / double(n - 10), 1e-12);
  EXPECT_GT(r.kld, 0.01);  // 4-bit weights do move the distributions

  // The model against itself: exactly 0 and 1; and behind a prefix of the first 3 tokens (their
  // KV from the same model), which the proxy takes off the sequence.
  Forward a(m, 64), b(m, 64);
  const ChatProxyResult self = run_chat_proxy(a, b, {}, {s});
  EXPECT_EQ(self.kld, 0.0);
  EXPECT_EQ(self.top1, 1.0);
  const std::vector<int32_t> pre(s.tokens.begin(), s.tokens.begin() + 3);
  const auto kv = KvPrefix::compute(m, pre);
  a.reset();
  b.reset();
  a.set_prefix(kv);
  b.set_prefix(kv);
  const ChatProxyResult behind = run_chat_proxy(a, b, pre, {s});
  EXPECT_EQ(behind.prefix_tokens_taken, 3);
  EXPECT_EQ(behind.tokens, self.tokens);
  EXPECT_EQ(behind.kld, 0.0);
}

}  // namespace
}  // namespace sinkq
