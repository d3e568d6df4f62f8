// BOS/EOS configuration (tokenizer_config.json, config.json, post-processor template), the
// Metaspace form of the SentencePiece-style tokenizer.json, invalid UTF-8 input, Mistral v3.
#include <gtest/gtest.h>

#include <filesystem>

#include "tok_test_util.h"

namespace sinkq::testing {
namespace {

using nlohmann::json;
using Ids = std::vector<int32_t>;

const std::string& stories_json() {
  static const std::string s = shared_dir() + "/models/stories260K/tokenizer.json";
  return s;
}

// A model dir whose tokenizer.json is a symlink to stories260K's, with its own config files.
class StoriesConfig : public ::testing::Test {
 protected:
  void SetUp() override { std::filesystem::create_symlink(stories_json(), dir_.file("tokenizer.json")); }
  std::unique_ptr<Tokenizer> load() { return Tokenizer::load(dir_.path()); }
  void write(const std::string& name, const std::string& text) { write_file_atomic(dir_.file(name), text); }
  TempDir dir_;
};

TEST_F(StoriesConfig, TemplateOnly) {
  auto t = load();  // no config files: BOS from the TemplateProcessing post-processor
  EXPECT_TRUE(t->add_bos());
  EXPECT_EQ(t->bos_id(), 1);
  EXPECT_EQ(t->eos_id(), -1);
  EXPECT_EQ(t->encode("a"), (Ids{1, 261}));
}

TEST_F(StoriesConfig, TokenizerConfigOverridesTemplate) {
  write("tokenizer_config.json",
        R"({"add_bos_token": false, "add_eos_token": true, "bos_token": {"content": "<s>"}, "eos_token": "</s>"})");
  auto t = load();
  EXPECT_FALSE(t->add_bos());
  EXPECT_EQ(t->bos_id(), 1);
  EXPECT_EQ(t->eos_id(), 2);
  EXPECT_EQ(t->encode("a"), (Ids{261, 2}));
  EXPECT_EQ(t->encode("a", {.add_special = false}), (Ids{261}));
}

TEST_F(StoriesConfig, ConfigJsonIdsAreFallbacks) {
  write("config.json", R"({"bos_token_id": 1, "eos_token_id": [2, 0]})");
  auto t = load();
  EXPECT_EQ(t->eos_id(), 2);  // first of the list
  EXPECT_EQ(t->encode("a"), (Ids{1, 261}));
}

TEST_F(StoriesConfig, SentencepieceBesideConfig) {
  std::filesystem::create_symlink(shared_dir() + "/models/stories260K/tokenizer.model", dir_.file("tokenizer.model"));
  write("tokenizer_config.json", R"({"add_bos_token": false, "add_eos_token": true})");
  auto t = Tokenizer::from_sentencepiece(dir_.file("tokenizer.model"));
  EXPECT_FALSE(t->add_bos());
  EXPECT_EQ(t->encode("a"), (Ids{261, 2}));
  // parse_special: "<s>" in the text is the control token (HF-slow behaviour) or plain text.
  EXPECT_EQ(t->encode("<s>a", {.add_special = false}), (Ids{1, 261}));
  EXPECT_NE(t->encode("<s>a", {.add_special = false, .parse_special = false}).front(), 1);
}

// Newer SentencePiece-style files express the same thing with a Metaspace pre-tokenizer
// (prepend_scheme "first", split false) and decoder. The ids are identical except that Metaspace,
// as in HF, does not prepend '▁' to text that already starts with a space: " x" -> "▁x", where the
// Prepend normalizer gives "▁▁x" (the non-legacy Llama behaviour).
TEST(MetaspaceForm, SameIdsAsNormalizerForm) {
  TempDir dir;
  json doc = json::parse(read_file(stories_json()));
  doc["normalizer"] = nullptr;
  doc["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "\u2581"}, {"prepend_scheme", "first"}, {"split", false}};
  doc["decoder"] = {{"type", "Sequence"},
                    {"decoders",
                     {{{"type", "ByteFallback"}},
                      {{"type", "Metaspace"}, {"replacement", "\u2581"}, {"prepend_scheme", "first"}, {"split", false}},
                      {{"type", "Fuse"}}}}};
  write_file_atomic(dir.file("tokenizer.json"), doc.dump());
  auto t = Tokenizer::load(dir.path());
  const Tokenizer& ref = shared_tokenizer("stories-hf");
  const json golden = json::parse(read_file(shared_dir() + "/golden/stories260K/tokens.json"));
  for (const json& c : golden["cases"]) {
    const std::string text = c["text"];
    const Ids ids = t->encode(text);
    if (!text.empty() && text[0] == ' ') {
      const std::string rest = text.substr(1);  // " " alone becomes "▁" (id 410)
      EXPECT_EQ(ids, rest.empty() ? Ids({1, 410}) : ref.encode(rest)) << escaped(text);
      continue;
    }
    EXPECT_EQ(ids, ref.encode(text)) << escaped(text);
    EXPECT_EQ(t->decode(ids), text) << escaped(text);
  }
  const std::string story = read_file(shared_dir() + "/golden/stories260K/tinystories_sample.txt");
  EXPECT_EQ(t->encode(story), ref.encode(story));
}

// Invalid UTF-8 input: HF-format tokenizers see U+FFFD (as a Rust/Python string would).
TEST(InvalidUtf8, BecomesReplacementCharacter) {
  const Tokenizer& t = shared_tokenizer("stories-hf");
  EXPECT_EQ(t.encode("a\xFF" "b"), t.encode("a\ufffd" "b"));
  const Tokenizer& g = shared_tokenizer("gpt2-hf");
  EXPECT_EQ(g.encode("a\xC3"), g.encode("a\ufffd"));
}

// mistral-common's golden chat encoding (samples/no_tools, v3): [INST]=3, [/INST]=4, text pieces
// encoded without BOS and without parsing specials.
TEST(Mistral, V3NoToolsSample) {
  const Tokenizer& t = shared_tokenizer("mistral-v3-sp");
  const std::string dir = tok_dir() + "/mistral-v0.3-spm/samples/no_tools";
  const json sample = json::parse(read_file(dir + "/sample.json"));
  const Ids expected = json::parse(read_file(dir + "/tokens_v3.json"))["tokens"].get<Ids>();
  Ids got{t.bos_id()};
  const EncodeOptions raw{.add_special = false, .parse_special = false};
  for (const json& m : sample["messages"]) {
    const Ids text = t.encode(m["content"].get<std::string>(), raw);
    if (m["role"] == "user") {
      got.push_back(t.token_to_id("[INST]"));
      got.insert(got.end(), text.begin(), text.end());
      got.push_back(t.token_to_id("[/INST]"));
    } else {
      got.insert(got.end(), text.begin(), text.end());
      got.push_back(t.eos_id());
    }
  }
  EXPECT_EQ(got, expected);
  EXPECT_EQ(t.token_to_id("[INST]"), 3);
  EXPECT_EQ(t.vocab_size(), 32768);
}

}  // namespace
}  // namespace sinkq::testing
