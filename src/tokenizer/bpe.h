// sinkq/tokenizer/bpe.h — the BPE model of HF tokenizers (internal header).
//
// A piece (one pre-token) starts as a list of symbols — its characters (SentencePiece-style
// vocabularies) or its bytes in the GPT-2 alphabet (byte-level) — and adjacent pairs are merged
// in the order of the `merges` list: lowest rank first, leftmost first among equal ranks. This is
// what HF tokenizers and sentencepiece's BPE (merges sorted by score) compute.
//
// Cost: pieces of up to kNaiveMaxSymbols symbols use a plain O(n^2) scan (faster for words);
// longer ones (a whole SentencePiece-style text has no pre-tokenizer, so a 1.3 MB file is ONE
// piece) use a min-heap of candidate pairs over a linked list of symbols, O(n log n). Both give
// identical results (tests check it).
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace sinkq::tok {

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using TokenMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

class BpeModel {
 public:
  static constexpr size_t kNaiveMaxSymbols = 24;

  // Parses the "model" object of a tokenizer.json ("type": "BPE"); `file` names it in errors.
  static BpeModel from_json(const nlohmann::json& model, const std::string& file);

  // Appends the ids of one piece. byte_level: the piece is raw bytes and each byte becomes the
  // token of its GPT-2 alphabet char; else the piece is text in the model's alphabet (e.g. with
  // '▁' for spaces) and each character is a symbol; characters missing from the vocabulary become
  // <0xNN> byte tokens (byte_fallback) or the unk token (fused if fuse_unk).
  // Throws sinkq::Error if a symbol has no token and there is neither fallback nor unk.
  void encode(std::string_view piece, bool byte_level, std::vector<int32_t>& out) const;

  // Merges `syms` (token ids) in place by merge rank. use_heap selects the algorithm (tests).
  void merge(std::vector<int32_t>& syms, bool use_heap) const;

  int32_t token_to_id(std::string_view token) const;  // -1 if absent
  // "" for ids that are not in the vocabulary.
  const std::string& id_to_token(int32_t id) const;
  int32_t vocab_size() const { return int32_t(id_to_token_.size()); }  // max id + 1
  size_t num_merges() const { return merges_.size(); }

 private:
  struct MergeInfo {
    int32_t rank;
    int32_t id;  // the merged token
  };
  static uint64_t pair_key(int32_t a, int32_t b) { return (uint64_t(uint32_t(a)) << 32) | uint32_t(b); }
  const MergeInfo* find_merge(int32_t a, int32_t b) const;
  void merge_naive(std::vector<int32_t>& syms) const;
  void merge_heap(std::vector<int32_t>& syms) const;
  void initial_symbols(std::string_view piece, bool byte_level, std::vector<int32_t>& syms) const;

  TokenMap token_to_id_;
  std::vector<std::string> id_to_token_;
  std::unordered_map<uint64_t, MergeInfo> merges_;
  int32_t ascii_ids_[128];        // id of each ASCII char as a token, -1 if none
  int32_t byte_level_ids_[256];   // id of each byte's GPT-2 alphabet char, -1 if none
  int32_t byte_fallback_ids_[256];  // id of <0xNN>, -1 if none
  int32_t unk_id_ = -1;
  bool fuse_unk_ = false;
  bool byte_fallback_ = false;
  bool ignore_merges_ = false;
  std::string file_;  // for error messages
};

}  // namespace sinkq::tok
