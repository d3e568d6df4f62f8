// Unit tests of the tokenizer.json stages (internal headers): BPE merge algorithms, pre-tokenizer
// split behaviours, normalizers, decoders, added-token matching.
#include <gtest/gtest.h>

#include <random>

#include "tok_test_util.h"
#include "tokenizer/added_tokens.h"
#include "tokenizer/bpe.h"
#include "tokenizer/hf_components.h"
#include "tokenizer/utf8.h"

namespace sinkq::testing {
namespace {

using nlohmann::json;
using Pieces = std::vector<std::string>;

// The heap merge (long pieces) and the naive merge (short pieces) must agree exactly, including
// on ties and on runs of the same symbol ("aaaa"), where the leftmost pair must win.
TEST(Bpe, HeapAndNaiveMergeAgree) {
  const json doc = json::parse(read_file(tok_dir() + "/llama2-hf/tokenizer.json"));
  const tok::BpeModel m = tok::BpeModel::from_json(doc["model"], "llama2-hf/tokenizer.json");
  std::vector<int32_t> alphabet;
  for (const char* s : {"\u2581", "a", "e", "t", "h", "s", "r", "n", "i", "o", "1", "3", ".", "\u00e9"}) {
    alphabet.push_back(m.token_to_id(s));
    ASSERT_GE(alphabet.back(), 0) << s;
  }
  std::mt19937 rng(7);
  for (int trial = 0; trial < 300; ++trial) {
    std::vector<int32_t> syms(2 + rng() % 300);
    const size_t k = 2 + rng() % alphabet.size();  // small alphabets give long runs and ties
    for (auto& s : syms) s = alphabet[rng() % k];
    std::vector<int32_t> a = syms, b = syms;
    m.merge(a, /*use_heap=*/true);
    m.merge(b, /*use_heap=*/false);
    ASSERT_EQ(a, b) << "trial " << trial;
  }
}

Pieces pretok(const json& j, const std::string& text, bool at_start = true) {
  const tok::PreTokenizer p = tok::PreTokenizer::from_json(j, "test.json");
  Pieces out;
  p.apply(text, at_start, out);
  return out;
}

json split(const char* behavior, bool invert = false, const char* literal = "-") {
  return {{"type", "Split"}, {"pattern", {{"String", literal}}}, {"behavior", behavior}, {"invert", invert}};
}

// The examples of HF's SplitDelimiterBehavior documentation.
TEST(PreTokenizer, SplitBehaviors) {
  const std::string s = "the-final--countdown";
  EXPECT_EQ(pretok(split("Removed"), s), (Pieces{"the", "final", "countdown"}));
  EXPECT_EQ(pretok(split("Isolated"), s), (Pieces{"the", "-", "final", "-", "-", "countdown"}));
  EXPECT_EQ(pretok(split("MergedWithPrevious"), s), (Pieces{"the-", "final-", "-", "countdown"}));
  EXPECT_EQ(pretok(split("MergedWithNext"), s), (Pieces{"the", "-final", "-", "-countdown"}));
  EXPECT_EQ(pretok(split("Contiguous"), s), (Pieces{"the", "-", "final", "--", "countdown"}));
  const json inv = {{"type", "Split"}, {"pattern", {{"Regex", "\\w+"}}}, {"behavior", "Removed"}, {"invert", true}};
  EXPECT_EQ(pretok(inv, "ab-cd..e"), (Pieces{"ab", "cd", "e"}));
}

TEST(PreTokenizer, ByteLevelMetaspaceDigits) {
  const json bl = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"use_regex", true}};
  EXPECT_EQ(pretok(bl, "Hello world's  end"), (Pieces{" Hello", " world", "'s", " ", " end"}));
  const json ms = {{"type", "Metaspace"}, {"replacement", "\u2581"}, {"prepend_scheme", "first"}, {"split", true}};
  EXPECT_EQ(pretok(ms, "hi there"), (Pieces{"\u2581hi", "\u2581there"}));
  EXPECT_EQ(pretok(ms, "hi there", /*at_start=*/false), (Pieces{"hi", "\u2581there"}));
  const json never = {{"type", "Metaspace"}, {"replacement", "\u2581"}, {"prepend_scheme", "never"}, {"split", false}};
  EXPECT_EQ(pretok(never, "a b"), (Pieces{"a\u2581b"}));
  const json legacy = {{"type", "Metaspace"}, {"replacement", "\u2581"}, {"add_prefix_space", true}};
  EXPECT_EQ(pretok(legacy, "a b", /*at_start=*/false), (Pieces{"\u2581a", "\u2581b"}));
  EXPECT_EQ(pretok({{"type", "Digits"}, {"individual_digits", true}}, "ab123c"), (Pieces{"ab", "1", "2", "3", "c"}));
  EXPECT_EQ(pretok({{"type", "Digits"}, {"individual_digits", false}}, "ab123c"), (Pieces{"ab", "123", "c"}));
  const json seq = {{"type", "Sequence"}, {"pretokenizers", {{{"type", "Digits"}, {"individual_digits", true}}, bl}}};
  EXPECT_EQ(pretok(seq, "x12"), (Pieces{" x", " 1", " 2"}));  // ByteLevel prefixes every piece, as HF
}

TEST(Normalizer, Steps) {
  auto norm = [](const json& j, const std::string& s) { return tok::Normalizer::from_json(j, "t.json").apply(s); };
  const json llama = {{"type", "Sequence"},
                      {"normalizers",
                       {{{"type", "Prepend"}, {"prepend", "\u2581"}},
                        {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\u2581"}}}}};
  EXPECT_EQ(norm(llama, "a b "), "\u2581a\u2581b\u2581");
  EXPECT_EQ(norm(llama, ""), "");  // Prepend leaves empty text alone
  EXPECT_EQ(norm({{"type", "Replace"}, {"pattern", {{"Regex", " {2,}"}}}, {"content", " "}}, "a   b  c"), "a b c");
  EXPECT_EQ(norm({{"type", "Strip"}, {"strip_left", true}, {"strip_right", false}}, " \u3000x "), "x ");
  EXPECT_EQ(norm({{"type", "NFC"}}, "e\u0301"), "\u00e9");
  EXPECT_EQ(norm({{"type", "NFD"}}, "\u00e9"), "e\u0301");
  EXPECT_EQ(norm({{"type", "NFKC"}}, "\ufb01"), "fi");
}

TEST(Decoder, Steps) {
  auto dec = [](const json& j, std::vector<std::string_view> toks, bool lossy = true) {
    return tok::Decoder::from_json(j, "t.json").decode(toks, lossy);
  };
  const json llama = json::parse(R"({"type": "Sequence", "decoders": [
      {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "}, {"type": "ByteFallback"},
      {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]})");
  EXPECT_EQ(dec(llama, {"\u2581Hi", "<0xE2>", "<0x82>", "<0xAC>", "!"}), "Hi\u20ac!");
  // An invalid byte run: HF gives one U+FFFD per byte; raw mode keeps the bytes for streaming.
  EXPECT_EQ(dec(llama, {"\u2581a", "<0xE2>", "<0x82>", "b"}), "a\ufffd\ufffdb");
  EXPECT_EQ(dec(llama, {"\u2581a", "<0xE2>", "<0x82>"}, false), "a\xE2\x82");
  EXPECT_EQ(dec(llama, {"\u2581", "\u2581x"}), " x");  // only one leading space is stripped
  EXPECT_EQ(dec(json(nullptr), {"a", "b"}), "a b");   // no decoder: HF joins with spaces
  const json bl = {{"type", "ByteLevel"}};
  EXPECT_EQ(dec(bl, {"\u0120Hello", "\u010a", "<|endoftext|>"}), " Hello\n<|endoftext|>");
  EXPECT_EQ(dec(bl, {"\u00e2\u0124"}), "\ufffd");  // bytes E2 82: incomplete -> one U+FFFD (lossy)
  const json ms = {{"type", "Metaspace"}, {"replacement", "\u2581"}, {"prepend_scheme", "always"}};
  EXPECT_EQ(dec(ms, {"\u2581Hey", "\u2581you"}), "Hey you");
}

TEST(AddedTokens, Matching) {
  std::vector<tok::AddedToken> toks(4);
  toks[0] = {10, "<x>", true, /*lstrip=*/true, false, false, false};
  toks[1] = {11, "<xy>", true, false, /*rstrip=*/true, false, false};
  toks[2] = {12, "ab", false, false, false, /*single_word=*/true, false};
  toks[3] = {13, "<s>", true, false, false, false, false};
  auto segs = [&](bool special, const std::string& text) {
    std::vector<std::string> out;
    for (const auto& s : tok::AddedTokenMatcher(toks, special).split(text)) {
      out.push_back(s.token_id >= 0 ? fmt::format("#{}", s.token_id) : text.substr(s.begin, s.end - s.begin));
    }
    return out;
  };
  EXPECT_EQ(segs(true, "q  <x>r"), (Pieces{"q", "#10", "r"}));           // lstrip eats the spaces
  EXPECT_EQ(segs(true, "<xy> \n r"), (Pieces{"#11", "r"}));              // longest match + rstrip
  EXPECT_EQ(segs(true, "cab ab abc"), (Pieces{"cab ", "#12", " abc"}));  // single_word
  EXPECT_EQ(segs(false, "<s>ab"), (Pieces{"<s>", "#12"}));               // specials off
  EXPECT_EQ(segs(true, "<s><s>"), (Pieces{"#13", "#13"}));
  EXPECT_EQ(segs(true, ""), Pieces{});
}

TEST(Utf8, Helpers) {
  EXPECT_TRUE(tok::is_valid_utf8("a\u00e9\u20ac\U0001F600"));
  EXPECT_FALSE(tok::is_valid_utf8("\xC0\xAF"));      // overlong
  EXPECT_FALSE(tok::is_valid_utf8("\xED\xA0\x80"));  // surrogate
  EXPECT_EQ(tok::utf8_lossy("a\xF0\x9F\x98" "b\xFF"), "a\ufffdb\ufffd");  // maximal subparts
  EXPECT_EQ(tok::utf8_complete_prefix("ab\xF0\x9F\x98"), 2u);
  EXPECT_EQ(tok::utf8_complete_prefix("ab\xF0\x9F\x98\x80"), 6u);
  EXPECT_EQ(tok::utf8_complete_prefix("ab\xFF"), 3u);  // invalid, not incomplete: not held back
  EXPECT_EQ(tok::byte_level_char(' '), "\u0120");
  EXPECT_EQ(tok::byte_level_char('\n'), "\u010a");
  EXPECT_EQ(tok::byte_level_char('A'), "A");
  EXPECT_EQ(tok::byte_level_byte(0x120), ' ');
  for (int b = 0; b < 256; ++b) {
    uint32_t cp = 0;
    const std::string& c = tok::byte_level_char(uint8_t(b));
    ASSERT_EQ(tok::utf8_valid_len(c, 0, &cp), c.size());
    EXPECT_EQ(tok::byte_level_byte(cp), b);
  }
}

}  // namespace
}  // namespace sinkq::testing
