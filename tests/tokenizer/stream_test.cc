// StreamDecoder over every tokenizer family: the pushed pieces are always complete UTF-8 and
// concatenate to decode(ids), including across the window restarts of long streams.
#include <gtest/gtest.h>

#include "tok_test_util.h"

namespace sinkq::testing {
namespace {

class Stream : public ::testing::TestWithParam<const char*> {};

std::string stream_all(const Tokenizer& tok, const std::vector<int32_t>& ids) {
  StreamDecoder sd(tok);
  std::string out;
  for (int32_t id : ids) {
    const std::string piece = sd.push(id);
    EXPECT_TRUE(tok::is_valid_utf8(piece));
    out += piece;
  }
  return out + sd.flush();
}

TEST_P(Stream, ConcatenationEqualsDecode) {
  const Tokenizer& tok = shared_tokenizer(GetParam());
  std::vector<std::string> texts = {
      " leading space and emoji \U0001F680\U0001F636\u200d\U0001F32B\ufe0f done",
      "\u6211\u60f3\u5728apple\u5de5\u4f5c1314151\u5929\uff5e \u1780\u17b6\u1793\u17cb",
      "  two leading spaces",
  };
  // Long text: many window restarts (the window restarts every ~64 ids).
  texts.push_back(read_text_file(shared_dir() + "/data/wikitext-2/wikitext2_test_joined.txt").substr(0, 6000));
  for (const VocabCase& c : read_llamacpp_cases("llama-spm")) texts.push_back(c.text);
  for (const std::string& text : texts) {
    const auto ids = tok.encode(text);  // with BOS where the tokenizer adds one
    EXPECT_EQ(stream_all(tok, ids), tok.decode(ids)) << GetParam() << " " << escaped(text.substr(0, 80));
  }
}

// Primed with a prompt, the pieces are the text the continuation adds: decode(prompt + rest) minus
// decode(prompt) — a SentencePiece continuation keeps its leading space (" world", not "world").
TEST_P(Stream, PrimedContinuesThePrompt) {
  const Tokenizer& tok = shared_tokenizer(GetParam());
  for (const std::string& text : {std::string("Hello world, this is a test."), std::string("Once upon a time there was")}) {
    const auto ids = tok.encode(text);
    for (size_t cut = 1; cut < ids.size(); ++cut) {
      const std::vector<int32_t> prompt(ids.begin(), ids.begin() + long(cut));
      StreamDecoder sd(tok);
      sd.prime(prompt);
      std::string out;
      for (size_t i = cut; i < ids.size(); ++i) out += sd.push(ids[i]);
      out += sd.flush();
      const std::string p = tok.decode(prompt), all = tok.decode(ids);
      ASSERT_EQ(all.rfind(p, 0), 0u);
      EXPECT_EQ(out, all.substr(p.size())) << GetParam() << " cut " << cut;
    }
  }
}

TEST_P(Stream, HoldsBackPartialCharacters) {
  const Tokenizer& tok = shared_tokenizer(GetParam());
  const auto ids = tok.encode("\U0001F680", {.add_special = false});  // 4 UTF-8 bytes
  StreamDecoder sd(tok);
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i) {
    const std::string piece = sd.push(ids[i]);
    if (i + 1 < ids.size()) {
      EXPECT_EQ(piece, "") << "emitted a partial character";
    }
    out += piece;
  }
  EXPECT_EQ(out + sd.flush(), tok.decode(ids));
}

TEST(StreamDecoder, FlushEmitsIncompleteBytesAsReplacement) {
  const Tokenizer& tok = shared_tokenizer("llama2-hf");
  StreamDecoder sd(tok);
  EXPECT_EQ(sd.push(tok.token_to_id("\u2581a")), "a");
  EXPECT_EQ(sd.push(tok.token_to_id("<0xF0>")), "");
  EXPECT_EQ(sd.push(tok.token_to_id("<0x9F>")), "");
  EXPECT_EQ(sd.flush(), "\ufffd");
}

INSTANTIATE_TEST_SUITE_P(Tok, Stream,
                         ::testing::Values("stories-hf", "stories-sp", "llama2-hf", "llama2-spm", "gpt2-hf",
                                           "llama3-tiktoken", "qwen2-tiktoken"),
                         [](const auto& info) {
                           std::string s = info.param;
                           for (char& c : s) {
                             if (c == '-') c = '_';
                           }
                           return s;
                         });

}  // namespace
}  // namespace sinkq::testing
