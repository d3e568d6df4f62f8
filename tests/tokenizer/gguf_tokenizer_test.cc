// Tokenizer::from_gguf_metadata: GGUF tokenizer metadata (tokenizer.ggml.*) through the existing
// implementations. Checked against transformers' tokenization of SmolLM2's GGUF (golden), llama.cpp's
// golden vectors for its vocab-only GGUFs, and the tokenizer.json / tokenizer.model loaders on the
// same vocabularies (stories260K, Llama-3, Qwen2).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>

#include "tok_test_util.h"

#include "io/gguf.h"

namespace sinkq::testing {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

std::string smollm_gguf() { return shared_dir() + "/models/smollm2-135m-instruct-q4_1/model.gguf"; }
std::string vocab_gguf(const std::string& vocab) {
  return tok_dir() + "/llamacpp-ggml-vocab/ggml-vocab-" + vocab + ".gguf";
}

// The metadata of a GGUF file, as the model loader hands it over.
json gguf_metadata(const std::string& path) { return GgufFile::open(path)->metadata(); }

std::unique_ptr<Tokenizer> gguf_tokenizer(const std::string& path) {
  return Tokenizer::from_gguf_metadata(gguf_metadata(path), path);
}

const Tokenizer* shared_gguf_tokenizer(const std::string& path) {
  static std::mutex mu;
  static std::map<std::string, std::unique_ptr<Tokenizer>> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto& slot = cache[path];
  if (!slot) slot = gguf_tokenizer(path);
  return slot.get();
}

#define GGUF_TOKENIZER(var, path)                                          \
  const Tokenizer* var = shared_gguf_tokenizer(path);                      \
  ASSERT_NE(var, nullptr) << (path)

// ---- SmolLM2-135M (gpt2 vocabulary, pre-tokenizer smollm) against transformers -----------------

const json& smollm_tokens_golden() {
  static const json j = json::parse(read_file(shared_dir() + "/golden/smollm2-135m/tokens.json"));
  return j;
}

TEST(GgufSmolLM2, Properties) {
  GGUF_TOKENIZER(t, smollm_gguf());
  const json& g = smollm_tokens_golden();
  EXPECT_EQ(t->kind(), "bpe-bytelevel");
  EXPECT_EQ(t->vocab_size(), 49152);
  EXPECT_EQ(t->bos_id(), g["bos_id"].get<int>());
  EXPECT_EQ(t->eos_id(), g["eos_id"].get<int>());
  EXPECT_EQ(t->add_bos(), g["add_bos_token"].get<bool>());
  EXPECT_EQ(t->token_to_id("<|im_end|>"), 2);
  EXPECT_EQ(t->token_to_id("\u0120the"), 260);
  for (int32_t id = 0; id <= 16; ++id) EXPECT_TRUE(t->is_special(id)) << id;  // the 17 control tokens
  EXPECT_FALSE(t->is_special(260));
  EXPECT_EQ(t->token_text(260), " the");
  EXPECT_EQ(t->token_text(1), "<|im_start|>");
  EXPECT_THAT(t->chat_template(), HasSubstr("You are a helpful AI assistant named SmolLM"));
}

TEST(GgufSmolLM2, TokensJson) {
  GGUF_TOKENIZER(t, smollm_gguf());
  const json& g = smollm_tokens_golden();
  ASSERT_EQ(g["cases"].size(), 30u);
  size_t ok = 0;
  for (const json& c : g["cases"]) {
    const std::string text = c["text"];
    const auto ids = c["ids"].get<std::vector<int32_t>>();
    const auto got = t->encode(text);
    EXPECT_EQ(got, ids) << escaped(text);
    ok += got == ids;
    EXPECT_EQ(t->encode(text, {.add_special = false}), c["ids_no_special"].get<std::vector<int32_t>>()) << escaped(text);
    // transformers' decode keeps special tokens by default.
    EXPECT_EQ(t->decode(ids, /*skip_special=*/false), c["decoded"].get<std::string>()) << escaped(text);
    EXPECT_EQ(t->decode(ids, /*skip_special=*/false), c["decoded_with_special"].get<std::string>()) << escaped(text);
  }
  std::printf("[ golden ] smollm2 GGUF vs transformers: %zu/30 cases match\n", ok);
  const json& chat = g["chat_template_example"];
  EXPECT_EQ(t->encode(chat["text"].get<std::string>()), chat["ids"].get<std::vector<int32_t>>());
}

// SmolLM2's own tokenizer.json and llama.cpp's "smollm" pre-tokenizer split every digit off before
// the GPT-2 regex; transformers' GGUF converter drops that Digits step. The two differ only where a
// run of whitespace precedes a digit: " \n\n\n 1" is [" \n\n", "\n ", "1"] with the split (the
// whitespace is a piece of its own) and [" \n\n", "\n", " ", "1"] without. We follow the model's
// tokenizer (and llama.cpp); the golden windows of ppl.json do not contain such a place and match
// exactly, the whole file has 8 tokens fewer than transformers' count.
TEST(GgufSmolLM2, WikitextWindows) {
  GGUF_TOKENIZER(t, smollm_gguf());
  const json g = json::parse(read_file(shared_dir() + "/golden/smollm2-135m/ppl.json"))["wikitext2_test"];
  const std::string text = read_text_file(shared_dir() + "/data/wikitext-2/wikitext2_test_joined.txt");
  const auto toks = t->encode(text, {.add_special = false});
  EXPECT_EQ(toks.size() + 8, g["total_tokens_in_file"].get<size_t>());
  ASSERT_EQ(g["per_window"].size(), 8u);
  for (const json& w : g["per_window"]) {
    const size_t k = w["k"].get<size_t>();
    std::vector<int32_t> ids{t->bos_id()};
    ASSERT_GE(toks.size(), 511 * (k + 1));
    ids.insert(ids.end(), toks.begin() + std::ptrdiff_t(511 * k), toks.begin() + std::ptrdiff_t(511 * (k + 1)));
    EXPECT_EQ(ids, w["ids"].get<std::vector<int32_t>>()) << "window " << k;
  }
  EXPECT_TRUE(t->decode(toks) == text) << "whole-file decode differs";
  const std::vector<int32_t> digit_split{t->token_to_id("\u0120\u010a\u010a"), t->token_to_id("\u010a\u0120"),
                                         t->token_to_id("1")};
  EXPECT_EQ(t->encode(" \n\n\n 1"), digit_split);
}

// ---- llama.cpp's vocab-only GGUFs against llama.cpp's golden vectors ---------------------------

struct VocabParam {
  const char* vocab;  // ggml-vocab-<vocab>.gguf (+ .inp / .out)
  const char* kind;
  bool round_trip;    // decode(ids) == input for every case
};

class GgufLlamaCppVocab : public ::testing::TestWithParam<VocabParam> {};

TEST_P(GgufLlamaCppVocab, MatchesGoldenIds) {
  const VocabParam& p = GetParam();
  GGUF_TOKENIZER(t, vocab_gguf(p.vocab));
  EXPECT_EQ(t->kind(), p.kind);
  const auto cases = read_llamacpp_cases(p.vocab);
  ASSERT_EQ(cases.size(), 46u);
  size_t ok = 0;
  for (const VocabCase& c : cases) {
    const auto ids = t->encode(c.text, {.add_special = false, .parse_special = false});
    EXPECT_EQ(ids, c.ids) << p.vocab << " on " << escaped(c.text);
    ok += ids == c.ids;
    if (p.round_trip) {
      EXPECT_EQ(t->decode(c.ids), c.text) << p.vocab << " decode of " << escaped(c.text);
    }
  }
  std::printf("[ golden ] GGUF %s: %zu/%zu cases match\n", p.vocab, ok, cases.size());
}

INSTANTIATE_TEST_SUITE_P(Tok, GgufLlamaCppVocab,
                         ::testing::Values(VocabParam{"gpt-2", "bpe-bytelevel", true},
                                           VocabParam{"mpt", "bpe-bytelevel", true},     // user-defined space runs
                                           VocabParam{"refact", "bpe-bytelevel", true},  // digits pre-tokenizer
                                           VocabParam{"llama-spm", "sentencepiece", true},
                                           VocabParam{"phi-3", "sentencepiece", true}),
                         [](const auto& info) {
                           std::string s = info.param.vocab;
                           for (char& c : s) if (!isalnum(uint8_t(c))) c = '_';
                           return s;
                         });

TEST(GgufLlamaSpm, SpecialsAndDefaults) {
  GGUF_TOKENIZER(t, vocab_gguf("llama-spm"));
  EXPECT_EQ(t->vocab_size(), 32000);
  EXPECT_EQ(t->bos_id(), 1);
  EXPECT_EQ(t->eos_id(), 2);
  EXPECT_TRUE(t->add_bos());
  EXPECT_EQ(t->encode("Hello"), (std::vector<int32_t>{1, 15043}));
  // Text after a special token gets the dummy-prefix space again (llama.cpp, sentencepiece-era HF).
  EXPECT_EQ(t->encode("a</s>b", {.add_special = false}), (std::vector<int32_t>{263, 2, 289}));
  EXPECT_EQ(t->encode("a</s> b", {.add_special = false}), (std::vector<int32_t>{263, 2, 29871, 289}));
  EXPECT_EQ(t->decode({1, 15043, 2}), "Hello");
}

// ---- The same vocabulary as GGUF metadata and as tokenizer.json / tokenizer.model --------------

// Pieces of a sentencepiece ModelProto (field 1: piece = 1, score = 2, type = 3), read with a
// minimal protobuf wire-format reader.
struct SpPiece {
  std::string piece;
  float score = 0;
  int type = 1;
};
std::vector<SpPiece> read_sp_pieces(const std::string& data) {
  auto varint = [](const std::string& b, size_t& p) {
    uint64_t r = 0;
    for (int shift = 0;; shift += 7) {
      SINKQ_CHECK(p < b.size(), "truncated varint");
      const auto c = uint8_t(b[p++]);
      r |= uint64_t(c & 0x7F) << shift;
      if (c < 0x80) return r;
    }
  };
  // Calls f(field, wire type, payload string for LEN, value for VARINT/I32) for each field.
  auto fields = [&](const std::string& b, auto&& f) {
    size_t p = 0;
    while (p < b.size()) {
      const uint64_t key = varint(b, p);
      const int field = int(key >> 3), wire = int(key & 7);
      if (wire == 0) {
        f(field, wire, std::string(), varint(b, p));
      } else if (wire == 2) {
        const size_t n = varint(b, p);
        f(field, wire, b.substr(p, n), 0);
        p += n;
      } else if (wire == 5) {
        uint32_t u = 0;
        std::memcpy(&u, b.data() + p, 4);
        f(field, wire, std::string(), u);
        p += 4;
      } else {
        SINKQ_CHECK(wire == 1, "unexpected wire type {}", wire);
        p += 8;
      }
    }
  };
  std::vector<SpPiece> out;
  fields(data, [&](int field, int wire, const std::string& payload, uint64_t) {
    if (field != 1 || wire != 2) return;
    SpPiece sp;
    fields(payload, [&](int f, int, const std::string& s, uint64_t v) {
      if (f == 1) sp.piece = s;
      if (f == 2) {
        const auto u = uint32_t(v);
        std::memcpy(&sp.score, &u, 4);
      }
      if (f == 3) sp.type = int(v);
    });
    out.push_back(std::move(sp));
  });
  return out;
}

// What llama.cpp's converter writes for a sentencepiece model: pieces, scores and types.
json llama_metadata_from_sp_model(const std::string& path) {
  json tokens = json::array(), scores = json::array(), types = json::array();
  for (const SpPiece& p : read_sp_pieces(read_file(path))) {
    tokens.push_back(p.piece);
    scores.push_back(p.score);
    types.push_back(p.type);
  }
  return {{"general.architecture", "llama"},
          {"tokenizer.ggml.model", "llama"},
          {"tokenizer.ggml.pre", "default"},
          {"tokenizer.ggml.tokens", tokens},
          {"tokenizer.ggml.scores", scores},
          {"tokenizer.ggml.token_type", types},
          {"tokenizer.ggml.bos_token_id", 1},
          {"tokenizer.ggml.eos_token_id", 2},
          {"tokenizer.ggml.unknown_token_id", 0},
          {"tokenizer.ggml.add_bos_token", true},
          {"tokenizer.ggml.add_eos_token", false}};
}

const Tokenizer& stories_gguf() {
  static const auto t = Tokenizer::from_gguf_metadata(
      llama_metadata_from_sp_model(shared_dir() + "/models/stories260K/tokenizer.model"), "stories260K.gguf");
  return *t;
}

TEST(GgufStories260K, Properties) {
  const Tokenizer& t = stories_gguf();
  EXPECT_EQ(t.kind(), "sentencepiece");
  EXPECT_EQ(t.vocab_size(), 512);
  EXPECT_EQ(t.bos_id(), 1);
  EXPECT_EQ(t.eos_id(), 2);
  EXPECT_TRUE(t.add_bos());
  EXPECT_EQ(t.token_to_id("\u2581a"), 261);
  EXPECT_TRUE(t.is_special(1));
  EXPECT_EQ(t.token_text(3 + 0xE2), "\xE2");
  EXPECT_EQ(t.chat_template(), "");
}

TEST(GgufStories260K, EqualsTokenizerJsonOnGoldenStrings) {
  const Tokenizer& hf = shared_tokenizer("stories-hf");  // Tokenizer::load(stories260K dir)
  const Tokenizer& t = stories_gguf();
  const json g = json::parse(read_file(shared_dir() + "/golden/stories260K/tokens.json"));
  ASSERT_EQ(g["cases"].size(), 30u);
  for (const json& c : g["cases"]) {
    const std::string text = c["text"];
    const auto ids = t.encode(text);
    EXPECT_EQ(ids, hf.encode(text)) << escaped(text);
    EXPECT_EQ(ids, c["ids"].get<std::vector<int32_t>>()) << escaped(text);
    EXPECT_EQ(t.encode(text, {.add_special = false}), hf.encode(text, {.add_special = false})) << escaped(text);
    EXPECT_EQ(t.decode(ids), c["decoded"].get<std::string>()) << escaped(text);
    EXPECT_EQ(t.decode(ids), hf.decode(ids)) << escaped(text);
  }
}

TEST(GgufStories260K, PplWindowsTinystories) {
  const Tokenizer& t = stories_gguf();
  const json corpus = json::parse(read_file(shared_dir() + "/golden/stories260K/ppl.json"))["tinystories_sample"];
  const auto toks = t.encode(read_text_file(shared_dir() + "/golden/stories260K/tinystories_sample.txt"),
                             {.add_special = false});
  ASSERT_EQ(toks.size(), corpus["total_tokens_in_file"].get<size_t>());
  for (size_t k = 0; k < 4; ++k) {
    std::vector<int32_t> w{1};
    w.insert(w.end(), toks.begin() + std::ptrdiff_t(511 * k), toks.begin() + std::ptrdiff_t(511 * (k + 1)));
    EXPECT_EQ(w, corpus["window_ids"][k].get<std::vector<int32_t>>()) << "window " << k;
  }
}

// What llama.cpp's converter writes for a byte-level tokenizer.json: the vocabulary by id, merges as
// "a b", added special tokens as control.
json gpt2_metadata_from_tokenizer_json(const std::string& path, const std::string& pre) {
  const json doc = json::parse(read_file(path));
  std::vector<std::string> by_id;
  std::vector<int> type;
  auto put = [&](const std::string& tok, size_t id, int ty) {
    if (id >= by_id.size()) {
      by_id.resize(id + 1);
      type.resize(id + 1, 0);
    }
    by_id[id] = tok;
    type[id] = ty;
  };
  for (const auto& [tok, id] : doc["model"]["vocab"].items()) put(tok, id.get<size_t>(), 1);
  for (const json& a : doc["added_tokens"]) put(a["content"], a["id"].get<size_t>(), a["special"].get<bool>() ? 3 : 4);
  for (size_t i = 0; i < by_id.size(); ++i) {
    if (type[i] == 0) {  // a hole in the ids: a placeholder, as llama.cpp's converter writes
      by_id[i] = "[PAD" + std::to_string(i) + "]";
      type[i] = 5;
    }
  }
  json merges = json::array();
  for (const json& m : doc["model"]["merges"]) {
    merges.push_back(m.is_string() ? m.get<std::string>() : m[0].get<std::string>() + " " + m[1].get<std::string>());
  }
  return {{"tokenizer.ggml.model", "gpt2"},
          {"tokenizer.ggml.pre", pre},
          {"tokenizer.ggml.tokens", by_id},
          {"tokenizer.ggml.token_type", type},
          {"tokenizer.ggml.merges", merges}};
}

struct ConvertedParam {
  const char* vocab;      // llama.cpp golden vectors (ggml-vocab-<vocab>.gguf.inp/.out)
  const char* tokenizer;  // shared_tokenizer() name whose tokenizer.json is converted
  const char* pre;
};

class GgufFromTokenizerJson : public ::testing::TestWithParam<ConvertedParam> {};

TEST_P(GgufFromTokenizerJson, MatchesGoldenAndTokenizerJson) {
  const ConvertedParam& p = GetParam();
  const Tokenizer& hf = shared_tokenizer(p.tokenizer);  // writes the converted tokenizer.json
  const std::string dir = converted_dir().file(std::string(p.tokenizer).substr(0, std::string(p.tokenizer).find('-')));
  json meta = gpt2_metadata_from_tokenizer_json(dir + "/tokenizer.json", p.pre);
  meta["tokenizer.ggml.add_bos_token"] = false;
  const auto t = Tokenizer::from_gguf_metadata(meta, std::string(p.vocab) + ".gguf");
  EXPECT_EQ(t->vocab_size(), hf.vocab_size());
  const auto cases = read_llamacpp_cases(p.vocab);
  ASSERT_EQ(cases.size(), 46u);
  for (const VocabCase& c : cases) {
    const auto ids = t->encode(c.text, {.add_special = false, .parse_special = false});
    EXPECT_EQ(ids, c.ids) << p.vocab << " on " << escaped(c.text);
    EXPECT_EQ(ids, hf.encode(c.text, {.add_special = false, .parse_special = false})) << escaped(c.text);
    EXPECT_EQ(t->decode(c.ids), c.text) << p.vocab << " decode of " << escaped(c.text);
  }
}

INSTANTIATE_TEST_SUITE_P(Tok, GgufFromTokenizerJson,
                         ::testing::Values(ConvertedParam{"llama-bpe", "llama3-tiktoken", "llama-bpe"},
                                           ConvertedParam{"qwen2", "qwen2-tiktoken", "qwen2"}),
                         [](const auto& info) {
                           std::string s = info.param.vocab;
                           for (char& c : s) if (!isalnum(uint8_t(c))) c = '_';
                           return s;
                         });

TEST(GgufLlama3, AddsBosByDefault) {
  shared_tokenizer("llama3-tiktoken");
  json meta = gpt2_metadata_from_tokenizer_json(converted_dir().file("llama3") + "/tokenizer.json", "llama-bpe");
  meta["tokenizer.ggml.bos_token_id"] = 128000;
  meta["tokenizer.ggml.eos_token_id"] = 128001;
  const auto t = Tokenizer::from_gguf_metadata(meta, "llama3.gguf");
  EXPECT_TRUE(t->add_bos());  // llama.cpp's default for the Llama-3 pre-tokenizer
  EXPECT_EQ(t->encode("Hello").front(), 128000);
  EXPECT_EQ(t->encode("<|begin_of_text|>Hi", {.add_special = false}).front(), 128000);
  EXPECT_TRUE(t->is_special(128000));
}

// ---- Small vocabularies and errors ---------------------------------------------------------------

// A byte-level vocabulary: every byte's GPT-2 character, "ab", one control and one user-defined token.
json tiny_gpt2() {
  json tokens = json::array(), types = json::array();
  for (int b = 0; b < 256; ++b) {
    tokens.push_back(tok::byte_level_char(uint8_t(b)));
    types.push_back(1);
  }
  for (const auto& [t, ty] : {std::pair<const char*, int>{"ab", 1}, {"<|end|>", 3}, {"<think>", 4}}) {
    tokens.push_back(t);
    types.push_back(ty);
  }
  return {{"tokenizer.ggml.model", "gpt2"},      {"tokenizer.ggml.pre", "gpt2"},
          {"tokenizer.ggml.tokens", tokens},     {"tokenizer.ggml.token_type", types},
          {"tokenizer.ggml.merges", {"a b"}},    {"tokenizer.ggml.eos_token_id", 257},
          {"tokenizer.chat_template", "{{ x }}"}};
}

TEST(GgufTiny, Gpt2AddedTokens) {
  const auto t = Tokenizer::from_gguf_metadata(tiny_gpt2(), "tiny.gguf");
  EXPECT_EQ(t->vocab_size(), 259);
  EXPECT_EQ(t->bos_id(), -1);
  EXPECT_EQ(t->eos_id(), 257);
  EXPECT_FALSE(t->add_bos());
  EXPECT_EQ(t->chat_template(), "{{ x }}");
  const int32_t ab = t->token_to_id("ab"), end = 257, think = 258;
  EXPECT_EQ(t->encode("ab<|end|>ab"), (std::vector<int32_t>{ab, end, ab}));
  // Control tokens are parsed only when asked; user-defined ones always.
  EXPECT_EQ(t->encode("ab<|end|>", {.parse_special = false}).size(), 1u + 7u);
  EXPECT_EQ(t->encode("<think>ab", {.parse_special = false}), (std::vector<int32_t>{think, ab}));
  EXPECT_TRUE(t->is_special(end));
  EXPECT_FALSE(t->is_special(think));
  EXPECT_EQ(t->decode({ab, end, think}), "ab<think>");
  EXPECT_EQ(t->decode({ab, end, think}, false), "ab<|end|><think>");
}

std::string gguf_error(const json& meta) {
  return error_of([&] { Tokenizer::from_gguf_metadata(meta, "/models/x.gguf"); });
}

TEST(GgufErrors, UnsupportedModel) {
  for (const char* model : {"bert", "t5", "rwkv"}) {
    json m = tiny_gpt2();
    m["tokenizer.ggml.model"] = model;
    const std::string e = gguf_error(m);
    EXPECT_THAT(e, HasSubstr("/models/x.gguf"));
    EXPECT_THAT(e, HasSubstr("tokenizer.ggml.model"));
    EXPECT_THAT(e, HasSubstr(model));
  }
  json m = tiny_gpt2();
  m.erase("tokenizer.ggml.model");
  EXPECT_THAT(gguf_error(m), HasSubstr("tokenizer.ggml.model is missing"));
  EXPECT_THAT(gguf_error(json::array()), HasSubstr("/models/x.gguf"));
}

TEST(GgufErrors, UnknownPreTokenizer) {
  json m = tiny_gpt2();
  m["tokenizer.ggml.pre"] = "falcon";
  const std::string e = gguf_error(m);
  EXPECT_THAT(e, HasSubstr("/models/x.gguf"));
  EXPECT_THAT(e, HasSubstr("tokenizer.ggml.pre 'falcon' is not supported"));
}

TEST(GgufErrors, MissingOrMalformedArrays) {
  json m = tiny_gpt2();
  m.erase("tokenizer.ggml.tokens");
  EXPECT_THAT(gguf_error(m), HasSubstr("/models/x.gguf: tokenizer.ggml.tokens is missing"));
  m = tiny_gpt2();
  m.erase("tokenizer.ggml.merges");
  EXPECT_THAT(gguf_error(m), HasSubstr("/models/x.gguf: tokenizer.ggml.merges is missing"));
  m = tiny_gpt2();
  m["tokenizer.ggml.tokens"] = json::array();
  EXPECT_THAT(gguf_error(m), HasSubstr("tokenizer.ggml.tokens is empty"));
  m = tiny_gpt2();
  m["tokenizer.ggml.tokens"][3] = 7;
  EXPECT_THAT(gguf_error(m), HasSubstr("tokenizer.ggml.tokens[3] is not a string"));
  m = tiny_gpt2();
  m["tokenizer.ggml.tokens"][258] = "ab";
  EXPECT_THAT(gguf_error(m), HasSubstr("tokenizer.ggml.tokens[258] 'ab' repeats tokenizer.ggml.tokens[256]"));
}

TEST(GgufErrors, LengthMismatch) {
  json m = tiny_gpt2();
  m["tokenizer.ggml.token_type"].erase(m["tokenizer.ggml.token_type"].size() - 1);
  const std::string e = gguf_error(m);
  EXPECT_THAT(e, HasSubstr("/models/x.gguf"));
  EXPECT_THAT(e, HasSubstr("tokenizer.ggml.token_type has 258 entries but tokenizer.ggml.tokens has 259"));
  json l = llama_metadata_from_sp_model(shared_dir() + "/models/stories260K/tokenizer.model");
  l["tokenizer.ggml.scores"].push_back(0.0);
  EXPECT_THAT(gguf_error(l), HasSubstr("tokenizer.ggml.scores has 513 entries but tokenizer.ggml.tokens has 512"));
}

TEST(GgufErrors, BadMergesIdsAndTypes) {
  for (const char* bad : {"ab", " a b", "a b c", "a "}) {
    json m = tiny_gpt2();
    m["tokenizer.ggml.merges"] = {bad};
    EXPECT_THAT(gguf_error(m), HasSubstr(fmt::format("tokenizer.ggml.merges[0] '{}' is not of the form 'left right'", bad)));
  }
  json m = tiny_gpt2();
  m["tokenizer.ggml.merges"] = {"a c"};
  EXPECT_THAT(gguf_error(m), HasSubstr("/models/x.gguf: tokenizer.ggml.merges[0] 'a c': 'ac' is not a token"));
  m = tiny_gpt2();
  m["tokenizer.ggml.eos_token_id"] = 259;
  EXPECT_THAT(gguf_error(m), HasSubstr("tokenizer.ggml.eos_token_id = 259 is outside the vocabulary"));
  m = tiny_gpt2();
  m["tokenizer.ggml.add_bos_token"] = true;
  EXPECT_THAT(gguf_error(m), HasSubstr("tokenizer.ggml.bos_token_id is not set"));
  m = tiny_gpt2();
  m["tokenizer.ggml.token_type"][0] = 9;
  EXPECT_THAT(gguf_error(m), HasSubstr("tokenizer.ggml.token_type[0] = 9 is not a token type"));
  m = tiny_gpt2();
  m["tokenizer.ggml.add_bos_token"] = 1;
  EXPECT_THAT(gguf_error(m), HasSubstr("tokenizer.ggml.add_bos_token is not a boolean"));
  json l = llama_metadata_from_sp_model(shared_dir() + "/models/stories260K/tokenizer.model");
  l["tokenizer.ggml.token_type"][300] = 6;
  EXPECT_THAT(gguf_error(l), HasSubstr("tokenizer.ggml.tokens[300]"));
}

}  // namespace
}  // namespace sinkq::testing
