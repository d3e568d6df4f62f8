// sinkq/tokenizer/pcre_regex.h — the regexes of HF pre-tokenizers / normalizers, run with PCRE2
// (internal header).
//
// HF tokenizers uses Oniguruma; the patterns in tokenizer.json files (GPT-2, Llama-3, Qwen2) need
// \p{L}/\p{N} classes, look-ahead `\s+(?!\S)` and `(?i:...)` groups. PCRE2 in UTF + UCP mode
// gives the same matches: \s, \d, \w use Unicode properties. JIT-compiled when available.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sinkq::tok {

class Regex {
 public:
  // `literal`: match the pattern text verbatim (HF {"String": ...} patterns).
  // Throws sinkq::Error "<where>: invalid regex ...: <PCRE2 message>".
  Regex(std::string_view pattern, bool literal, const std::string& where);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Non-overlapping, leftmost matches [begin, end) in byte offsets, scanning left to right (the
  // findall / find_iter order). Empty matches are skipped. `text` must be valid UTF-8.
  std::vector<std::pair<size_t, size_t>> find_all(std::string_view text) const;

  const std::string& pattern() const { return pattern_; }

 private:
  std::string pattern_;
  std::string where_;  // the file and field the pattern came from, for errors while matching
  void* code_ = nullptr;  // pcre2_code_8*
};

}  // namespace sinkq::tok
