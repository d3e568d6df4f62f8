// sinkq/tokenizer/hf_components.h — the normalizer, pre-tokenizer and decoder stages of an HF
// tokenizer.json (internal header). Each parses its JSON object (null = identity) and throws
// sinkq::Error naming the file and the field path for anything it does not support.
//
// Supported (what Llama-2/3, Mistral, Phi-2/3, GPT-2, Qwen2, TinyLlama files use):
//   normalizer:    Sequence, Prepend, Replace (String | Regex), NFC/NFD/NFKC/NFKD, Strip
//   pre_tokenizer: Sequence, Split (String | Regex; Isolated/Removed/MergedWithPrevious/
//                  MergedWithNext/Contiguous; invert), ByteLevel, Metaspace, Digits
//   decoder:       Sequence, Replace, ByteFallback, Fuse, Strip, ByteLevel, Metaspace
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/pcre_regex.h"
#include "tokenizer/utf8.h"

namespace sinkq::tok {

class Normalizer {
 public:
  static Normalizer from_json(const nlohmann::json& j, const std::string& file);
  // Input and output are valid UTF-8.
  std::string apply(std::string_view s) const;
  bool empty() const { return steps_.empty(); }

 private:
  enum class Kind { kPrepend, kReplace, kUnicode, kStrip };
  struct Step {
    Kind kind;
    std::string text;     // Prepend: prefix; Replace: literal pattern (when no regex)
    std::string content;  // Replace: replacement
    std::shared_ptr<Regex> regex;
    NormForm form = NormForm::kNFC;
    bool left = false, right = false;  // Strip
  };
  void parse(const nlohmann::json& j, const std::string& file, const std::string& field);
  std::vector<Step> steps_;
};

class PreTokenizer {
 public:
  static PreTokenizer from_json(const nlohmann::json& j, const std::string& file);
  // Splits one normalized text segment into the pieces the model encodes separately.
  // at_input_start: the segment begins the whole input (Metaspace prepend_scheme "first").
  void apply(std::string_view segment, bool at_input_start, std::vector<std::string>& pieces) const;
  bool empty() const { return steps_.empty(); }
  // A ByteLevel step ran: pieces are raw bytes that the model maps through the GPT-2 alphabet.
  bool byte_level() const { return byte_level_; }

 private:
  enum class Kind { kSplit, kByteLevel, kMetaspace, kDigits };
  enum class Behavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };
  struct Step {
    Kind kind;
    std::shared_ptr<Regex> regex;  // Split; ByteLevel with use_regex (the GPT-2 pattern)
    Behavior behavior = Behavior::kIsolated;
    bool invert = false;
    bool add_prefix_space = false;  // ByteLevel
    std::string replacement;        // Metaspace
    int prepend = 0;                // Metaspace: 0 never, 1 first, 2 always
    bool split = false;             // Metaspace
    bool individual_digits = false; // Digits
  };
  void parse(const nlohmann::json& j, const std::string& file, const std::string& field);
  static void split_by(const Step& st, const std::string& piece, std::vector<std::string>& out);
  std::vector<Step> steps_;
  bool byte_level_ = false;
};

class Decoder {
 public:
  static Decoder from_json(const nlohmann::json& j, const std::string& file);
  // Tokens (vocabulary strings) -> text. lossy: as HF, invalid UTF-8 from byte tokens becomes
  // U+FFFD; otherwise the raw bytes are kept (for streaming, which completes them later).
  std::string decode(const std::vector<std::string_view>& tokens, bool lossy) const;
  bool byte_level() const { return byte_level_; }

 private:
  enum class Kind { kReplace, kByteFallback, kFuse, kStrip, kByteLevel, kMetaspace };
  struct Step {
    Kind kind;
    std::string pattern, content;  // Replace (literal); Strip content; Metaspace replacement
    std::shared_ptr<Regex> regex;  // Replace with a Regex pattern
    int start = 0, stop = 0;       // Strip
    bool prepend = false;          // Metaspace: strip the leading space of the first token
  };
  void parse(const nlohmann::json& j, const std::string& file, const std::string& field);
  std::vector<Step> steps_;
  bool none_ = true;  // no decoder at all: HF joins tokens with ' '
  bool byte_level_ = false;
};

// An HF pattern object: {"String": "literal"} or {"Regex": "..."}.
struct Pattern {
  std::string literal;           // when regex is null
  std::shared_ptr<Regex> regex;  // for {"Regex": ...}
};
Pattern parse_pattern(const nlohmann::json& j, const std::string& file, const std::string& field);

// Appends the bytes a byte-level token (GPT-2 alphabet) stands for.
void append_byte_level(std::string_view token, std::string& out);

// Replaces every occurrence of `from` (non-empty) in s by `to`.
std::string replace_all(std::string_view s, std::string_view from, std::string_view to);

}  // namespace sinkq::tok
