#include "tokenizer/added_tokens.h"

#include <algorithm>

#include "tokenizer/utf8.h"

namespace sinkq::tok {
namespace {

// Code point of the character that ends just before s[pos] (pos > 0) and its byte length.
uint32_t char_before(std::string_view s, size_t pos, size_t* len) {
  size_t b = pos - 1;
  while (b > 0 && pos - b < 4 && (uint8_t(s[b]) & 0xC0) == 0x80) --b;
  uint32_t cp = 0xFFFD;
  size_t n = utf8_valid_len(s, b, &cp);
  if (n != pos - b) {  // not a well-formed char ending at pos: treat the last byte alone
    *len = 1;
    return 0xFFFD;
  }
  *len = n;
  return cp;
}

uint32_t char_at(std::string_view s, size_t pos, size_t* len) {
  uint32_t cp = 0xFFFD;
  size_t n = utf8_valid_len(s, pos, &cp);
  *len = n ? n : 1;
  return cp;
}

// Approximates regex \w (letters, digits, '_'): any non-ASCII char that is not whitespace counts.
bool is_word_char(uint32_t cp) {
  if (cp < 0x80) return (cp >= '0' && cp <= '9') || (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') || cp == '_';
  return !is_unicode_whitespace(cp);
}

}  // namespace

AddedTokenMatcher::AddedTokenMatcher(const std::vector<AddedToken>& tokens, bool include_special) {
  for (const AddedToken& t : tokens) {
    if (t.content.empty() || (t.special && !include_special)) continue;
    int32_t node = 0;
    for (char c : t.content) {
      int32_t nx = child(node, uint8_t(c));
      if (nx < 0) {
        nx = int32_t(nodes_.size());
        auto& ch = nodes_[size_t(node)].children;
        ch.insert(std::lower_bound(ch.begin(), ch.end(), std::make_pair(uint8_t(c), int32_t(-1))),
                  {uint8_t(c), nx});
        nodes_.emplace_back();
      }
      node = nx;
    }
    if (nodes_[size_t(node)].token < 0) {  // duplicate contents: the first definition wins
      nodes_[size_t(node)].token = int32_t(tokens_.size());
      tokens_.push_back(t);
    }
  }
}

int32_t AddedTokenMatcher::child(int32_t node, uint8_t b) const {
  const auto& ch = nodes_[size_t(node)].children;
  auto it = std::lower_bound(ch.begin(), ch.end(), std::make_pair(b, int32_t(-1)));
  return it != ch.end() && it->first == b ? it->second : -1;
}

std::vector<TextSegment> AddedTokenMatcher::split(std::string_view text) const {
  std::vector<TextSegment> out;
  size_t pending = 0;  // start of the text not yet emitted
  size_t i = 0;
  while (i < text.size()) {
    // Longest token starting at i.
    int32_t node = 0, best = -1;
    size_t best_end = 0;
    for (size_t k = i; k < text.size(); ++k) {
      node = child(node, uint8_t(text[k]));
      if (node < 0) break;
      if (nodes_[size_t(node)].token >= 0) {
        best = nodes_[size_t(node)].token;
        best_end = k + 1;
      }
    }
    if (best < 0) {
      ++i;
      continue;
    }
    const AddedToken& t = tokens_[size_t(best)];
    size_t len = 0;
    if (t.single_word && ((i > 0 && is_word_char(char_before(text, i, &len))) ||
                          (best_end < text.size() && is_word_char(char_at(text, best_end, &len))))) {
      ++i;  // as HF: a leftmost-longest match that fails single_word is skipped, not shortened
      continue;
    }
    size_t start = i, end = best_end;
    if (t.lstrip) {
      while (start > pending && is_unicode_whitespace(char_before(text, start, &len))) start -= len;
    }
    if (t.rstrip) {
      while (end < text.size() && is_unicode_whitespace(char_at(text, end, &len))) end += len;
    }
    if (start > pending) out.push_back({-1, pending, start});
    out.push_back({t.id, start, end});
    pending = i = end;
  }
  if (pending < text.size()) out.push_back({-1, pending, text.size()});
  return out;
}

}  // namespace sinkq::tok
