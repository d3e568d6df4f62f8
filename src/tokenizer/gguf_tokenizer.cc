// Tokenizer from a GGUF file's tokenizer metadata (llama.cpp's tokenizer.ggml.* keys).
//
// No tokenizer of its own: the metadata is turned into what the existing implementations read,
//   gpt2  -> an HF tokenizer.json document (BPE model, byte-level), run by hf_tokenizer.cc;
//   llama -> a sentencepiece ModelProto (BPE with scores), run by sp_tokenizer.cc,
// so a GGUF tokenizes exactly like the same vocabulary loaded from tokenizer.json / tokenizer.model.
//
// Choices (llama.cpp = src/llama-vocab.cpp; transformers = its GGUF tokenizer converter):
//   - gpt2 tokenizer.ggml.pre picks the pre-tokenizer the model's own tokenizer.json has; an unknown
//     value is an error, never a guess. Absent = "default" (llama.cpp does the same, with a warning).
//       gpt2, gpt-2, default, mpt, phi-2, olmo:   ByteLevel(add_prefix_space=false) with the GPT-2 regex
//                                                 ("default" as transformers; llama.cpp's own default
//                                                 regex set is an older variant)
//       smollm, refact, starcoder:                Digits(individual) + the same, as the models'
//                                                 tokenizer.json and llama.cpp (which splits every \p{N}
//                                                 first). transformers' converter drops the Digits step:
//                                                 its ids differ where whitespace precedes a digit
//                                                 (" \n 1"), 8 tokens in WikiText-2's 305k for SmolLM2
//       llama-bpe, llama3, llama-v3:              Llama-3's Split regex + ByteLevel(use_regex=false);
//                                                 ignore_merges and add_bos default true (llama.cpp and
//                                                 Llama-3's tokenizer.json)
//       qwen2, deepseek-r1-qwen:                  Qwen2's Split regex + ByteLevel, NFC normalizer (as
//                                                 Qwen2's tokenizer.json; llama.cpp and transformers
//                                                 skip NFC, which only matters for non-NFC input)
//   - token types: control (3) -> special added token, user-defined (4) -> non-special added token
//     (matched in the text even when special tokens are not parsed), both normalized=false, as
//     transformers does. Unlike transformers, tokens outside the byte-level alphabet (e.g. MPT's runs
//     of raw spaces) keep their text instead of being skipped: that is what llama.cpp and the model's
//     own tokenizer.json do (llama.cpp's golden vectors check it).
//   - llama: pieces keep their type (unknown/control/user-defined/unused/byte, same numbering as
//     sentencepiece); the unknown_token_id piece (else the first unknown-typed one, else id 0) is
//     the one UNKNOWN piece sentencepiece allows, other unknown-typed pieces (Phi-3's [PADn])
//     become control pieces (llama.cpp matches both kinds only when parsing special tokens).
//     Normalizer: identity, add_dummy_prefix = tokenizer.ggml.add_space_prefix (default true),
//     remove_extra_whitespaces = tokenizer.ggml.remove_extra_whitespaces (default false), spaces
//     escaped to '▁'; byte_fallback when <0xNN> byte pieces exist. tokenizer.ggml.merges and .pre
//     are ignored (llama.cpp merges by score too).
//   - BOS/EOS: tokenizer.ggml.bos_token_id / eos_token_id (llama defaults 1 / 2 like llama.cpp; gpt2
//     none). add_bos: tokenizer.ggml.add_bos_token, else llama.cpp's default (true for llama and
//     the Llama-3 pre-tokenizers, false otherwise); add_eos likewise (default false).
//   - Empty tokens are renamed "[EMPTY_<id>]" (llama.cpp); repeated tokens are an error (llama.cpp
//     refuses them too). unknown/padding ids are checked to be in range; padding is not used.
#include <nlohmann/json.hpp>

#include <cstring>
#include <optional>
#include <unordered_map>

#include "core/error.h"
#include "tokenizer/json_util.h"
#include "tokenizer/special_config.h"
#include "tokenizer/tokenizer_impl.h"

namespace sinkq::tok {
namespace {

using nlohmann::json;

// llama.cpp's token types; the same numbers as sentencepiece's SentencePiece.Type.
[[maybe_unused]] constexpr int32_t kUndefined = 0, kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6;

constexpr const char* kModelKey = "tokenizer.ggml.model";
constexpr const char* kPreKey = "tokenizer.ggml.pre";
constexpr const char* kTokensKey = "tokenizer.ggml.tokens";
constexpr const char* kTypesKey = "tokenizer.ggml.token_type";
constexpr const char* kScoresKey = "tokenizer.ggml.scores";
constexpr const char* kMergesKey = "tokenizer.ggml.merges";

// Pre-tokenizer regexes as in the models' tokenizer.json (Llama-3 groups up to 3 digits, Qwen2
// splits each digit).
const char* const kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* const kQwen2Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// Typed access to the metadata with errors naming the key and the file.
class Meta {
 public:
  Meta(const json& j, const std::string& source) : j_(j), src_(source) {
    SINKQ_CHECK(j.is_object(), "{}: GGUF metadata is not an object of key -> value", source);
  }
  const std::string& source() const { return src_; }
  bool has(const char* key) const { return json_find(j_, key) != nullptr; }

  std::optional<std::string> opt_string(const char* key) const {
    const json* v = json_find(j_, key);
    if (!v) return std::nullopt;
    SINKQ_CHECK(v->is_string(), "{}: {} is not a string", src_, key);
    return v->get<std::string>();
  }
  std::optional<bool> opt_bool(const char* key) const {
    const json* v = json_find(j_, key);
    if (!v) return std::nullopt;
    SINKQ_CHECK(v->is_boolean(), "{}: {} is not a boolean", src_, key);
    return v->get<bool>();
  }
  // A token id: an integer in [0, n_tokens).
  std::optional<int32_t> opt_id(const char* key, size_t n_tokens) const {
    const json* v = json_find(j_, key);
    if (!v) return std::nullopt;
    SINKQ_CHECK(v->is_number_integer(), "{}: {} is not an integer", src_, key);
    const int64_t id = v->get<int64_t>();
    SINKQ_CHECK(id >= 0 && uint64_t(id) < n_tokens, "{}: {} = {} is outside the vocabulary (0..{})", src_, key, id,
                n_tokens - 1);
    return int32_t(id);
  }
  // A required array (of `n` entries when n > 0).
  const json& array(const char* key, size_t n = 0) const {
    const json* v = json_find(j_, key);
    SINKQ_CHECK(v, "{}: {} is missing", src_, key);
    SINKQ_CHECK(v->is_array(), "{}: {} is not an array", src_, key);
    SINKQ_CHECK(n == 0 || v->size() == n, "{}: {} has {} entries but {} has {}", src_, key, v->size(), kTokensKey, n);
    return *v;
  }
  std::vector<std::string> strings(const char* key) const {
    const json& a = array(key);
    std::vector<std::string> out;
    out.reserve(a.size());
    for (size_t i = 0; i < a.size(); ++i) {
      SINKQ_CHECK(a[i].is_string(), "{}: {}[{}] is not a string", src_, key, i);
      out.push_back(a[i].get<std::string>());
    }
    return out;
  }

 private:
  const json& j_;
  std::string src_;
};

// The parts every vocabulary has: tokens (unique, non-empty), their types and scores.
struct Vocab {
  std::vector<std::string> tokens;
  std::unordered_map<std::string_view, int32_t> ids;  // views into `tokens`
  std::vector<int32_t> types;  // kNormal where the file has no token_type
  std::vector<float> scores;   // 0 where the file has no scores (llama.cpp)
  std::optional<int32_t> bos, eos, unk;
};

Vocab read_vocab(const Meta& m) {
  Vocab v;
  v.tokens = m.strings(kTokensKey);
  const size_t n = v.tokens.size();
  SINKQ_CHECK(n > 0, "{}: {} is empty", m.source(), kTokensKey);
  SINKQ_CHECK(n < (size_t(1) << 30), "{}: {} has {} entries (too many)", m.source(), kTokensKey, n);
  for (size_t i = 0; i < n; ++i) {
    if (v.tokens[i].empty()) v.tokens[i] = fmt::format("[EMPTY_{}]", i);  // as llama.cpp
  }
  v.ids.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    auto [it, fresh] = v.ids.emplace(v.tokens[i], int32_t(i));
    SINKQ_CHECK(fresh, "{}: {}[{}] '{}' repeats {}[{}]", m.source(), kTokensKey, i, v.tokens[i], kTokensKey, it->second);
  }
  v.types.assign(n, kNormal);
  if (m.has(kTypesKey)) {
    const json& a = m.array(kTypesKey, n);
    for (size_t i = 0; i < n; ++i) {
      SINKQ_CHECK(a[i].is_number_integer(), "{}: {}[{}] is not an integer", m.source(), kTypesKey, i);
      const int64_t t = a[i].get<int64_t>();
      SINKQ_CHECK(t >= kUndefined && t <= kByte, "{}: {}[{}] = {} is not a token type (0..6)", m.source(), kTypesKey, i, t);
      v.types[i] = t == kUndefined ? kNormal : int32_t(t);
    }
  }
  v.scores.assign(n, 0.0f);
  if (m.has(kScoresKey)) {
    const json& a = m.array(kScoresKey, n);
    for (size_t i = 0; i < n; ++i) {
      SINKQ_CHECK(a[i].is_number(), "{}: {}[{}] is not a number", m.source(), kScoresKey, i);
      v.scores[i] = a[i].get<float>();
    }
  }
  v.bos = m.opt_id("tokenizer.ggml.bos_token_id", n);
  v.eos = m.opt_id("tokenizer.ggml.eos_token_id", n);
  v.unk = m.opt_id("tokenizer.ggml.unknown_token_id", n);
  m.opt_id("tokenizer.ggml.padding_token_id", n);  // checked only: Tokenizer has no pad id
  return v;
}

// BOS/EOS, add_bos/add_eos and the chat template, in the form the implementations take them.
SpecialConfig special_config(const Meta& m, const Vocab& v, std::optional<int32_t> bos, std::optional<int32_t> eos,
                             bool default_add_bos) {
  SpecialConfig sc;
  if (bos) {
    sc.bos_token = v.tokens[size_t(*bos)];
    sc.bos_id = *bos;
  }
  if (eos) {
    sc.eos_token = v.tokens[size_t(*eos)];
    sc.eos_id = *eos;
  }
  sc.add_bos = m.opt_bool("tokenizer.ggml.add_bos_token").value_or(default_add_bos);
  sc.add_eos = m.opt_bool("tokenizer.ggml.add_eos_token").value_or(false);
  SINKQ_CHECK(!*sc.add_bos || bos, "{}: tokenizer.ggml.add_bos_token is true{} but tokenizer.ggml.bos_token_id is "
              "not set", m.source(), m.has("tokenizer.ggml.add_bos_token") ? "" : " (the default for this vocabulary)");
  SINKQ_CHECK(!*sc.add_eos || eos, "{}: tokenizer.ggml.add_eos_token is true but tokenizer.ggml.eos_token_id is "
              "not set", m.source());
  sc.chat_template = m.opt_string("tokenizer.chat_template");
  return sc;
}

// ---- gpt2: byte-level BPE as a tokenizer.json document ------------------------------------------

json byte_level_step(bool use_regex) {
  return {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", use_regex}};
}

json split_step(const char* pattern) {
  return {{"type", "Split"}, {"pattern", {{"Regex", pattern}}}, {"behavior", "Isolated"}, {"invert", false}};
}

struct BytePre {
  json normalizer, pre_tokenizer;
  bool ignore_merges = false, add_bos = false;
};

BytePre byte_level_pre(const std::string& pre, const std::string& source) {
  auto is = [&](std::initializer_list<const char*> names) {
    for (const char* n : names) if (pre == n) return true;
    return false;
  };
  BytePre p;
  if (is({"gpt2", "gpt-2", "default", "mpt", "phi-2", "olmo"})) {
    p.pre_tokenizer = byte_level_step(true);
  } else if (is({"smollm", "refact", "starcoder"})) {
    p.pre_tokenizer = {{"type", "Sequence"},
                       {"pretokenizers", json::array({{{"type", "Digits"}, {"individual_digits", true}},
                                                      byte_level_step(true)})}};
  } else if (is({"llama-bpe", "llama3", "llama-v3"})) {
    p.pre_tokenizer = {{"type", "Sequence"},
                       {"pretokenizers", json::array({split_step(kLlama3Pattern), byte_level_step(false)})}};
    p.ignore_merges = true;
    p.add_bos = true;
  } else if (is({"qwen2", "deepseek-r1-qwen"})) {
    p.normalizer = {{"type", "NFC"}};
    p.pre_tokenizer = {{"type", "Sequence"},
                       {"pretokenizers", json::array({split_step(kQwen2Pattern), byte_level_step(false)})}};
  } else {
    fail("{}: {} '{}' is not supported (supported: gpt2, gpt-2, default, mpt, phi-2, olmo, smollm, refact, "
         "starcoder, llama-bpe, llama3, llama-v3, qwen2, deepseek-r1-qwen)", source, kPreKey, pre);
  }
  return p;
}

std::unique_ptr<Tokenizer> make_byte_level(const Meta& m, const Vocab& v) {
  const std::string pre = m.opt_string(kPreKey).value_or("default");
  BytePre p = byte_level_pre(pre, m.source());

  json vocab = json::object();
  for (size_t i = 0; i < v.tokens.size(); ++i) vocab[v.tokens[i]] = i;
  json merges = json::array();
  {
    const json& a = m.array(kMergesKey);
    for (size_t r = 0; r < a.size(); ++r) {
      SINKQ_CHECK(a[r].is_string(), "{}: {}[{}] is not a string", m.source(), kMergesKey, r);
      const std::string& s = a[r].get_ref<const std::string&>();
      const size_t sp = s.find(' ');
      SINKQ_CHECK(sp != std::string::npos && sp != 0 && sp + 1 != s.size() && s.find(' ', sp + 1) == std::string::npos,
                  "{}: {}[{}] '{}' is not of the form 'left right'", m.source(), kMergesKey, r, s);
      const std::string left = s.substr(0, sp), right = s.substr(sp + 1), merged = left + right;
      for (const std::string* part : {&left, &right, &merged}) {
        SINKQ_CHECK(v.ids.count(*part), "{}: {}[{}] '{}': '{}' is not a token", m.source(), kMergesKey, r, s, *part);
      }
      merges.push_back(json::array({left, right}));
    }
  }
  json added = json::array();
  for (size_t i = 0; i < v.tokens.size(); ++i) {
    if (v.types[i] != kControl && v.types[i] != kUserDefined) continue;
    added.push_back({{"id", i}, {"content", v.tokens[i]}, {"special", v.types[i] == kControl}, {"normalized", false},
                     {"lstrip", false}, {"rstrip", false}, {"single_word", false}});
  }
  json model = {{"type", "BPE"}, {"vocab", std::move(vocab)}, {"merges", std::move(merges)},
                {"ignore_merges", p.ignore_merges}, {"byte_fallback", false}, {"fuse_unk", false}};
  if (v.unk) model["unk_token"] = v.tokens[size_t(*v.unk)];
  const json doc = {{"version", "1.0"},
                    {"added_tokens", std::move(added)},
                    {"normalizer", p.normalizer},
                    {"pre_tokenizer", p.pre_tokenizer},
                    {"post_processor", nullptr},
                    {"decoder", byte_level_step(true)},
                    {"model", std::move(model)}};
  return make_hf_tokenizer_from_json(doc, special_config(m, v, v.bos, v.eos, p.add_bos), m.source());
}

// ---- llama: SentencePiece BPE as a serialized ModelProto ----------------------------------------
// Protobuf wire format, only what sentencepiece_model.proto needs here.

void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out += char(uint8_t(v) | 0x80);
    v >>= 7;
  }
  out += char(v);
}
void put_tag(std::string& out, int field, int wire_type) { put_varint(out, (uint64_t(field) << 3) | uint64_t(wire_type)); }
void put_uint(std::string& out, int field, uint64_t v) {
  put_tag(out, field, 0);
  put_varint(out, v);
}
void put_bytes(std::string& out, int field, std::string_view s) {
  put_tag(out, field, 2);
  put_varint(out, s.size());
  out.append(s);
}
void put_float(std::string& out, int field, float f) {
  put_tag(out, field, 5);
  uint32_t u = 0;
  std::memcpy(&u, &f, 4);
  for (int i = 0; i < 4; ++i) out += char(uint8_t(u >> (8 * i)));
}

bool is_byte_piece(std::string_view p) {
  auto hex = [](char c) { return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'F') || (c >= 'a' && c <= 'f'); };
  return p.size() == 6 && p.substr(0, 3) == "<0x" && hex(p[3]) && hex(p[4]) && p[5] == '>';
}

std::unique_ptr<Tokenizer> make_sentencepiece(const Meta& m, const Vocab& v) {
  const size_t n = v.tokens.size();
  // sentencepiece wants exactly one UNKNOWN piece.
  int32_t unk = 0;
  if (v.unk) {
    unk = *v.unk;
  } else {
    for (size_t i = 0; i < n; ++i) {
      if (v.types[i] == kUnknown) {
        unk = int32_t(i);
        break;
      }
    }
  }
  // llama.cpp's defaults for a sentencepiece vocabulary: <s> = 1, </s> = 2.
  std::optional<int32_t> bos = v.bos, eos = v.eos;
  if (!bos && n > 1) bos = 1;
  if (!eos && n > 2) eos = 2;

  std::string proto;
  bool has_bytes = false;
  for (size_t i = 0; i < n; ++i) {
    int32_t type = v.types[i];
    if (int32_t(i) == unk) type = kUnknown;
    else if (type == kUnknown) type = kControl;
    if (type == kByte) {
      SINKQ_CHECK(is_byte_piece(v.tokens[i]), "{}: {}[{}] '{}' has the byte type ({}[{}] = 6) but is not <0xNN>",
                  m.source(), kTokensKey, i, v.tokens[i], kTypesKey, i);
      has_bytes = true;
    }
    std::string piece;
    put_bytes(piece, 1, v.tokens[i]);
    put_float(piece, 2, v.scores[i]);
    put_uint(piece, 3, uint64_t(type));
    put_bytes(proto, 1, piece);  // ModelProto.pieces
  }
  std::string trainer;
  put_uint(trainer, 3, 2);  // model_type = BPE
  put_uint(trainer, 4, n);  // vocab_size
  put_uint(trainer, 35, has_bytes ? 1 : 0);  // byte_fallback
  put_uint(trainer, 40, uint64_t(unk));      // unk_id
  put_bytes(proto, 2, trainer);
  std::string norm;
  put_bytes(norm, 1, "identity");  // name; no precompiled_charsmap: no normalization
  put_uint(norm, 3, m.opt_bool("tokenizer.ggml.add_space_prefix").value_or(true) ? 1 : 0);  // add_dummy_prefix
  put_uint(norm, 4, m.opt_bool("tokenizer.ggml.remove_extra_whitespaces").value_or(false) ? 1 : 0);
  put_uint(norm, 5, 1);  // escape_whitespaces
  put_bytes(proto, 3, norm);
  return make_sp_tokenizer_from_proto(proto, special_config(m, v, bos, eos, /*default_add_bos=*/true), m.source());
}

}  // namespace

std::unique_ptr<Tokenizer> make_gguf_tokenizer(const json& meta, const std::string& source) {
  const Meta m(meta, source);
  const std::optional<std::string> model = m.opt_string(kModelKey);
  SINKQ_CHECK(model, "{}: {} is missing (no tokenizer in this GGUF)", source, kModelKey);
  if (*model != "gpt2" && *model != "llama") {
    fail("{}: {} '{}' is not supported (only gpt2 and llama vocabularies)", source, kModelKey, *model);
  }
  const Vocab v = read_vocab(m);
  return *model == "gpt2" ? make_byte_level(m, v) : make_sentencepiece(m, v);
}

}  // namespace sinkq::tok
