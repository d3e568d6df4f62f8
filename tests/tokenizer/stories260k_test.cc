// Golden tokenization of stories260K (tokens.json, ppl.json windows): the HF tokenizer.json path
// and the sentencepiece path must both reproduce sentencepiece's ids exactly.
#include <gtest/gtest.h>

#include <cstdio>

#include "tok_test_util.h"

namespace sinkq::testing {
namespace {

using nlohmann::json;

const json& tokens_golden() {
  static const json j = json::parse(read_file(shared_dir() + "/golden/stories260K/tokens.json"));
  return j;
}
const json& ppl_golden() {
  static const json j = json::parse(read_file(shared_dir() + "/golden/stories260K/ppl.json"));
  return j;
}

class Stories : public ::testing::TestWithParam<const char*> {
 protected:
  const Tokenizer& tok() const { return shared_tokenizer(GetParam()); }
};

TEST_P(Stories, Properties) {
  const Tokenizer& t = tok();
  EXPECT_EQ(t.vocab_size(), 512);
  EXPECT_EQ(t.bos_id(), 1);
  EXPECT_EQ(t.eos_id(), 2);
  EXPECT_TRUE(t.add_bos());
  EXPECT_EQ(t.kind(), std::string(GetParam()) == "stories-hf" ? "bpe-spm" : "sentencepiece");
  EXPECT_EQ(t.token_to_id("<s>"), 1);
  EXPECT_EQ(t.token_to_id("\u2581a"), 261);
  EXPECT_EQ(t.token_to_id("no such token"), -1);
  EXPECT_TRUE(t.is_special(1));
  EXPECT_FALSE(t.is_special(261));
  EXPECT_EQ(t.token_text(261), " a");
  EXPECT_EQ(t.token_text(3 + 0xE2), "\xE2");  // <0xE2> byte-fallback piece
  EXPECT_EQ(t.token_text(1), "<s>");
}

TEST_P(Stories, TokensJson) {
  const json& g = tokens_golden();
  ASSERT_EQ(g["cases"].size(), 30u);
  for (const json& c : g["cases"]) {
    const std::string text = c["text"];
    const auto ids = c["ids"].get<std::vector<int32_t>>();
    const std::string decoded = c["decoded"];
    EXPECT_EQ(tok().encode(text), ids) << escaped(text);
    EXPECT_EQ(tok().decode(ids), decoded) << escaped(text);
    EXPECT_EQ(tok().decode(std::vector<int32_t>(ids.begin() + 1, ids.end())), decoded) << escaped(text);
    EXPECT_EQ(tok().decode_bytes(ids), decoded) << escaped(text);
    // Raw text only: the same ids without BOS.
    EXPECT_EQ(tok().encode(text, {.add_special = false}), std::vector<int32_t>(ids.begin() + 1, ids.end()));
  }
}

TEST_P(Stories, StreamDecoderReproducesDecode) {
  for (const json& c : tokens_golden()["cases"]) {
    const auto ids = c["ids"].get<std::vector<int32_t>>();
    StreamDecoder sd(tok());
    std::string streamed;
    for (int32_t id : ids) {
      std::string piece = sd.push(id);
      EXPECT_TRUE(sinkq::tok::is_valid_utf8(piece)) << escaped(piece);  // never a partial character
      streamed += piece;
    }
    streamed += sd.flush();
    EXPECT_EQ(streamed, c["decoded"].get<std::string>());
  }
}

// ppl.json: toks = encode(whole file, CRLF -> LF, no BOS); window k = [1] + toks[511k : 511k + 511].
void check_windows(const Tokenizer& tok, const json& corpus, const std::string& path, const char* label) {
  const std::string text = read_text_file(path);
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<int32_t> toks = tok.encode(text, {.add_special = false});
  const double secs = seconds_since(t0);
  std::printf("[ timing ] %s: encode %zu bytes -> %zu tokens in %.3f s\n", label, text.size(), toks.size(), secs);
  EXPECT_EQ(toks.size(), corpus["total_tokens_in_file"].get<size_t>());
  const auto& windows = corpus["window_ids"];
  ASSERT_EQ(windows.size(), 4u);
  for (size_t k = 0; k < windows.size(); ++k) {
    std::vector<int32_t> w{1};
    ASSERT_GE(toks.size(), 511 * (k + 1));
    w.insert(w.end(), toks.begin() + std::ptrdiff_t(511 * k), toks.begin() + std::ptrdiff_t(511 * (k + 1)));
    EXPECT_EQ(w, windows[k].get<std::vector<int32_t>>()) << label << " window " << k;
  }
  // Lossless: the decode of the whole file is the file (the dummy-prefix space is stripped again).
  EXPECT_TRUE(tok.decode(toks) == text) << label << ": whole-file decode differs";
}

TEST_P(Stories, PplWindowsWikitext) {
  check_windows(tok(), ppl_golden()["wikitext2_test"], shared_dir() + "/data/wikitext-2/wikitext2_test_joined.txt",
                GetParam());
}

TEST_P(Stories, PplWindowsTinystories) {
  check_windows(tok(), ppl_golden()["tinystories_sample"], shared_dir() + "/golden/stories260K/tinystories_sample.txt",
                GetParam());
}

INSTANTIATE_TEST_SUITE_P(Tok, Stories, ::testing::Values("stories-hf", "stories-sp"),
                         [](const auto& info) { return std::string(info.param) == "stories-hf" ? "HfJson" : "SentencePiece"; });

// The model directory has tokenizer.json, so load() must pick it; tokenizer_config.json's
// add_bos_token=true gives BOS.
TEST(StoriesLoad, PrefersTokenizerJson) {
  EXPECT_EQ(shared_tokenizer("stories-hf").kind(), "bpe-spm");
}

}  // namespace
}  // namespace sinkq::testing
