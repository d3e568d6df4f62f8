// tests/tokenizer/tiktoken_convert.h — test-only converter from a tiktoken rank file
// ("base64(token bytes) rank" per line: Llama-3's tokenizer.model, Qwen's qwen.tiktoken) to an HF
// tokenizer.json with a byte-level BPE model, the way transformers' TikTokenConverter does it:
//   vocab  = every token, written in the GPT-2 byte alphabet, id = rank;
//   merges = for every token of >= 2 bytes, every split into two tokens that are both in the
//            vocabulary, ordered by the merged token's rank (then by the parts' ranks).
// BPE with these merges merges, at each step, the adjacent pair whose concatenation has the
// lowest rank — exactly tiktoken's algorithm. Header-only because tests/tokenizer/ only compiles
// *_test.cc files.
#pragma once

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "core/error.h"
#include "core/mmap.h"
#include "tokenizer/utf8.h"

namespace sinkq::testing {

// Pre-tokenizer regexes, as in the HF tokenizer.json of Llama-3 and Qwen2 (and llama.cpp's
// "llama-bpe" / "qwen2" pre-tokenizers). Llama-3 groups digits by up to 3; Qwen2 splits each digit.
inline const std::string kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
inline const std::string kQwen2Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

struct TiktokenSpec {
  std::string rank_file;
  std::string pattern;
  bool nfc = false;            // Qwen2: normalizer NFC
  bool ignore_merges = false;  // Llama-3: a pre-token that is itself a token is emitted whole
  std::vector<std::pair<std::string, int32_t>> specials;  // added special tokens (content, id)
  std::string bos;  // if set, TemplateProcessing adds this special token before the text
};

inline std::string base64_decode(std::string_view in) {
  auto val = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  std::string out;
  uint32_t acc = 0;
  int bits = 0;
  for (char c : in) {
    if (c == '=') break;
    int v = val(c);
    SINKQ_CHECK(v >= 0, "bad base64 character in '{}'", in);
    acc = (acc << 6) | uint32_t(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += char((acc >> bits) & 0xFF);
    }
  }
  return out;
}

inline std::string to_byte_level(std::string_view bytes) {
  std::string s;
  for (char c : bytes) s += tok::byte_level_char(uint8_t(c));
  return s;
}

// Builds the tokenizer.json document for `spec`.
inline nlohmann::json tiktoken_to_hf_json(const TiktokenSpec& spec) {
  using nlohmann::json;
  const std::string text = read_file(spec.rank_file);
  std::unordered_map<std::string, int32_t> ranks;
  std::vector<std::pair<std::string, int32_t>> tokens;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t eol = text.find('\n', pos);
    if (eol == std::string::npos) eol = text.size();
    std::string_view line(text.data() + pos, eol - pos);
    pos = eol + 1;
    if (line.empty()) continue;
    size_t sp = line.find(' ');
    SINKQ_CHECK(sp != std::string_view::npos, "{}: line without rank", spec.rank_file);
    std::string tok = base64_decode(line.substr(0, sp));
    int32_t rank = std::stoi(std::string(line.substr(sp + 1)));
    ranks.emplace(tok, rank);
    tokens.emplace_back(std::move(tok), rank);
  }
  std::vector<std::tuple<int32_t, int32_t, int32_t, size_t, size_t>> merges;  // (merged, l, r, token, split)
  for (size_t t = 0; t < tokens.size(); ++t) {
    const std::string& tok = tokens[t].first;
    for (size_t i = 1; i < tok.size(); ++i) {
      auto l = ranks.find(tok.substr(0, i)), r = ranks.find(tok.substr(i));
      if (l != ranks.end() && r != ranks.end()) merges.emplace_back(tokens[t].second, l->second, r->second, t, i);
    }
  }
  std::sort(merges.begin(), merges.end());

  json vocab = json::object();
  for (const auto& [tok, rank] : tokens) vocab[to_byte_level(tok)] = rank;
  json jm = json::array();
  for (const auto& m : merges) {
    const std::string& tok = tokens[std::get<3>(m)].first;
    size_t i = std::get<4>(m);
    jm.push_back(json::array({to_byte_level(tok.substr(0, i)), to_byte_level(tok.substr(i))}));
  }
  json added = json::array();
  for (const auto& [content, id] : spec.specials) {
    added.push_back({{"id", id}, {"content", content}, {"single_word", false}, {"lstrip", false},
                     {"rstrip", false}, {"normalized", false}, {"special", true}});
  }
  json post = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", false}};
  if (!spec.bos.empty()) {
    int32_t bos_id = -1;
    for (const auto& [content, id] : spec.specials) if (content == spec.bos) bos_id = id;
    post = {{"type", "TemplateProcessing"},
            {"single", json::array({{{"SpecialToken", {{"id", spec.bos}, {"type_id", 0}}}},
                                    {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
            {"pair", json::array()},
            {"special_tokens", {{spec.bos, {{"id", spec.bos}, {"ids", {bos_id}}, {"tokens", {spec.bos}}}}}}};
  }
  json doc = {
      {"version", "1.0"},
      {"added_tokens", added},
      {"normalizer", spec.nfc ? json{{"type", "NFC"}} : json(nullptr)},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         json::array({{{"type", "Split"}, {"pattern", {{"Regex", spec.pattern}}}, {"behavior", "Isolated"}, {"invert", false}},
                      {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}}})}}},
      {"post_processor", post},
      {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
      {"model",
       {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"continuing_subword_prefix", nullptr},
        {"end_of_word_suffix", nullptr}, {"fuse_unk", false}, {"byte_fallback", false},
        {"ignore_merges", spec.ignore_merges}, {"vocab", vocab}, {"merges", jm}}}};
  return doc;
}

inline void write_tiktoken_tokenizer_json(const TiktokenSpec& spec, const std::string& out_path) {
  write_file_atomic(out_path, tiktoken_to_hf_json(spec).dump());
}

// Llama-3's 256 special tokens (ids 128000..128255, Llama-3.0 names).
inline std::vector<std::pair<std::string, int32_t>> llama3_specials() {
  std::vector<std::pair<std::string, int32_t>> s = {
      {"<|begin_of_text|>", 128000}, {"<|end_of_text|>", 128001}, {"<|start_header_id|>", 128006},
      {"<|end_header_id|>", 128007}, {"<|eot_id|>", 128009}};
  int reserved = 0;
  for (int32_t id = 128002; id < 128256; ++id) {
    if (id == 128006 || id == 128007 || id == 128009) continue;
    s.emplace_back("<|reserved_special_token_" + std::to_string(reserved++) + "|>", id);
  }
  return s;
}

}  // namespace sinkq::testing
