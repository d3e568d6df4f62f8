// Failure modes: every error is a sinkq::Error whose message names the file (and the field).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>

#include "tok_test_util.h"

namespace sinkq::testing {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

// A small valid byte-level tokenizer.json to break in different ways.
json minimal_doc() {
  return json::parse(R"({
    "version": "1.0",
    "added_tokens": [{"id": 3, "content": "<eos>", "special": true}],
    "normalizer": null,
    "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "use_regex": true},
    "post_processor": null,
    "decoder": {"type": "ByteLevel"},
    "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2, "<eos>": 3}, "merges": ["a b"]}
  })");
}

class TokErrors : public ::testing::Test {
 protected:
  std::string write_doc(const std::string& text) {
    write_file_atomic(dir_.file("tokenizer.json"), text);
    return dir_.file("tokenizer.json");
  }
  std::string load_error(const json& doc) {
    write_doc(doc.dump());
    return error_of([&] { Tokenizer::load(dir_.path()); });
  }
  TempDir dir_;
};

TEST_F(TokErrors, MinimalDocLoads) {
  write_doc(minimal_doc().dump());
  auto t = Tokenizer::load(dir_.path());
  EXPECT_EQ(t->encode("ab<eos>"), (std::vector<int32_t>{2, 3}));
  EXPECT_EQ(t->vocab_size(), 4);
  EXPECT_EQ(t->bos_id(), -1);
  EXPECT_EQ(t->eos_id(), -1);
  EXPECT_FALSE(t->add_bos());
}

TEST_F(TokErrors, MissingDirectory) {
  const std::string missing = dir_.file("no-such-model");
  EXPECT_THAT(error_of([&] { Tokenizer::load(missing); }), HasSubstr(missing));
}

TEST_F(TokErrors, NotADirectory) {
  write_file_atomic(dir_.file("plain.txt"), "x");
  EXPECT_THAT(error_of([&] { Tokenizer::load(dir_.file("plain.txt")); }), HasSubstr("plain.txt"));
}

TEST_F(TokErrors, NoTokenizerFiles) {
  const std::string msg = error_of([&] { Tokenizer::load(dir_.path()); });
  EXPECT_THAT(msg, HasSubstr(dir_.path()));
  EXPECT_THAT(msg, HasSubstr("tokenizer.json"));
  EXPECT_THAT(msg, HasSubstr("tokenizer.model"));
}

TEST_F(TokErrors, MissingExplicitFiles) {
  EXPECT_THAT(error_of([&] { Tokenizer::from_tokenizer_json(dir_.file("tokenizer.json")); }),
              HasSubstr(dir_.file("tokenizer.json")));
  EXPECT_THAT(error_of([&] { Tokenizer::from_sentencepiece(dir_.file("tokenizer.model")); }),
              HasSubstr(dir_.file("tokenizer.model")));
}

TEST_F(TokErrors, GarbageSentencepieceModel) {
  write_file_atomic(dir_.file("tokenizer.model"), "this is not a protobuf");
  EXPECT_THAT(error_of([&] { Tokenizer::load(dir_.path()); }), HasSubstr(dir_.file("tokenizer.model")));
}

TEST_F(TokErrors, MalformedJson) {
  write_doc("{\"model\": {\"type\": \"BPE\", ");
  const std::string msg = error_of([&] { Tokenizer::load(dir_.path()); });
  EXPECT_THAT(msg, HasSubstr(dir_.file("tokenizer.json")));
  EXPECT_THAT(msg, HasSubstr("malformed JSON"));
}

TEST_F(TokErrors, UnknownModelType) {
  json doc = minimal_doc();
  doc["model"]["type"] = "WordPiece";
  const std::string msg = load_error(doc);
  EXPECT_THAT(msg, HasSubstr(dir_.file("tokenizer.json")));
  EXPECT_THAT(msg, HasSubstr("model.type 'WordPiece'"));
}

TEST_F(TokErrors, MissingModel) {
  json doc = minimal_doc();
  doc.erase("model");
  EXPECT_THAT(load_error(doc), HasSubstr("model is missing"));
}

TEST_F(TokErrors, BadMerge) {
  json doc = minimal_doc();
  doc["model"]["merges"] = {"a zz"};
  const std::string msg = load_error(doc);
  EXPECT_THAT(msg, HasSubstr(dir_.file("tokenizer.json")));
  EXPECT_THAT(msg, HasSubstr("model.merges[0]"));
}

TEST_F(TokErrors, BadVocabId) {
  json doc = minimal_doc();
  doc["model"]["vocab"]["c"] = "seven";
  EXPECT_THAT(load_error(doc), HasSubstr("model.vocab['c']"));
}

TEST_F(TokErrors, UnsupportedComponents) {
  json doc = minimal_doc();
  doc["normalizer"] = {{"type", "Sequence"}, {"normalizers", {{{"type", "Lowercase"}}}}};
  EXPECT_THAT(load_error(doc), HasSubstr("normalizer.normalizers[0].type 'Lowercase'"));
  doc = minimal_doc();
  doc["pre_tokenizer"] = {{"type", "BertPreTokenizer"}};
  EXPECT_THAT(load_error(doc), HasSubstr("pre_tokenizer.type 'BertPreTokenizer'"));
  doc = minimal_doc();
  doc["decoder"] = {{"type", "WordPiece"}};
  EXPECT_THAT(load_error(doc), HasSubstr("decoder.type 'WordPiece'"));
  doc = minimal_doc();
  doc["post_processor"] = {{"type", "Mystery"}};
  EXPECT_THAT(load_error(doc), HasSubstr("post_processor.type 'Mystery'"));
}

TEST_F(TokErrors, BadRegex) {
  json doc = minimal_doc();
  doc["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "(unclosed"}}}, {"behavior", "Isolated"}};
  const std::string msg = load_error(doc);
  EXPECT_THAT(msg, HasSubstr(dir_.file("tokenizer.json")));
  EXPECT_THAT(msg, HasSubstr("pre_tokenizer.pattern"));
  EXPECT_THAT(msg, HasSubstr("invalid regex"));
}

// A pattern that backtracks catastrophically hits PCRE2's match limit on a long input: the error
// names the file and field the pattern came from (was "regex '...' failed on input" alone).
TEST_F(TokErrors, RegexMatchLimitNamesTheFile) {
  json doc = minimal_doc();
  doc["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "(a+)+$"}}}, {"behavior", "Isolated"}};
  write_doc(doc.dump());
  auto t = Tokenizer::load(dir_.path());
  const std::string msg = error_of([&] { t->encode(std::string(40, 'a') + "b"); });
  EXPECT_THAT(msg, HasSubstr(dir_.file("tokenizer.json")));
  EXPECT_THAT(msg, HasSubstr("pre_tokenizer.pattern"));
  EXPECT_THAT(msg, HasSubstr("limit"));
}

// A number JSON allows but a double cannot hold (fuzz finding, fuzz_tokenizer_json): an error
// naming the file, not nlohmann's out_of_range escaping the loader.
TEST_F(TokErrors, NumberOverflowIsMalformedJson) {
  write_doc(R"({"version": "1.0", "model": {"type": "BPE", "dropout": 44E444444444444444444}})");
  const std::string msg = error_of([&] { Tokenizer::load(dir_.path()); });
  EXPECT_THAT(msg, HasSubstr(dir_.file("tokenizer.json")));
  EXPECT_THAT(msg, HasSubstr("malformed JSON"));
}

// A sentencepiece model with an empty piece (50 bytes, fuzz finding, fuzz_tokenizer_model):
// libsentencepiece's trie builder throws its own exception ("zero-length key"); sinkq's error
// names the file.
TEST_F(TokErrors, SentencepieceLibraryExceptionNamesTheFile) {
  const unsigned char bytes[] = {0x0a, 0x0e, 0x0a, 0x05, 0x3c, 0x75, 0x6e, 0x6b, 0x3e, 0x15, 0x38, 0x00, 0x00, 0x00, 0x18, 0x02, 0x0a, 0x0c, 0x0a, 0x03, 0x00, 0x00, 0x00, 0x18, 0x43, 0x2d, 0x0f, 0x0a, 0x06, 0x3c, 0x35, 0x78, 0x31, 0x31, 0x3e, 0x15, 0x00, 0x00, 0x00, 0x79, 0x12, 0x00, 0x18, 0x01, 0x20, 0x00, 0x28, 0x01, 0x32, 0x00};
  write_file_atomic(dir_.file("tokenizer.model"), std::string(reinterpret_cast<const char*>(bytes), sizeof bytes));
  const std::string msg = error_of([&] { Tokenizer::from_sentencepiece(dir_.file("tokenizer.model")); });
  EXPECT_THAT(msg, HasSubstr(dir_.file("tokenizer.model")));
  EXPECT_THAT(msg, HasSubstr("not a valid sentencepiece model"));
}

TEST_F(TokErrors, MalformedTokenizerConfig) {
  write_doc(minimal_doc().dump());
  write_file_atomic(dir_.file("tokenizer_config.json"), "{not json");
  EXPECT_THAT(error_of([&] { Tokenizer::load(dir_.path()); }), HasSubstr(dir_.file("tokenizer_config.json")));
  write_file_atomic(dir_.file("tokenizer_config.json"), R"({"add_bos_token": "yes"})");
  const std::string msg = error_of([&] { Tokenizer::load(dir_.path()); });
  EXPECT_THAT(msg, HasSubstr(dir_.file("tokenizer_config.json")));
  EXPECT_THAT(msg, HasSubstr("add_bos_token"));
}

TEST_F(TokErrors, MalformedConfigJson) {
  write_doc(minimal_doc().dump());
  write_file_atomic(dir_.file("config.json"), R"({"eos_token_id": "two"})");
  const std::string msg = error_of([&] { Tokenizer::load(dir_.path()); });
  EXPECT_THAT(msg, HasSubstr(dir_.file("config.json")));
  EXPECT_THAT(msg, HasSubstr("eos_token_id"));
}

TEST_F(TokErrors, CharacterWithoutTokenOrFallback) {
  json doc = minimal_doc();
  doc["pre_tokenizer"] = nullptr;  // plain characters: 'z' has no token, no byte_fallback, no unk
  doc["decoder"] = nullptr;
  write_doc(doc.dump());
  auto t = Tokenizer::load(dir_.path());
  EXPECT_THAT(error_of([&] { t->encode("az"); }), HasSubstr(dir_.file("tokenizer.json")));
  // With an unk token, unknown characters become (fused) unk.
  doc["model"]["vocab"]["<unk>"] = 4;
  doc["model"]["unk_token"] = "<unk>";
  doc["model"]["fuse_unk"] = true;
  write_doc(doc.dump());
  t = Tokenizer::load(dir_.path());
  EXPECT_EQ(t->encode("azzb"), (std::vector<int32_t>{0, 4, 1}));
}

}  // namespace
}  // namespace sinkq::testing
