// Normalizer and pre-tokenizer stages of HF tokenizer.json (see hf_components.h).
#include <nlohmann/json.hpp>

#include <algorithm>

#include "core/error.h"
#include "tokenizer/hf_components.h"
#include "tokenizer/json_util.h"

namespace sinkq::tok {

using nlohmann::json;

namespace {

// The pattern the ByteLevel pre-tokenizer uses when use_regex is true (GPT-2's).
const std::string kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

std::shared_ptr<Regex> gpt2_regex() {
  static const auto re = std::make_shared<Regex>(kGpt2Pattern, false, "ByteLevel pre-tokenizer");
  return re;
}

std::string strip_whitespace(std::string_view s, bool left, bool right) {
  size_t b = 0, e = s.size(), n = 0;
  uint32_t cp = 0;
  while (left && b < e && (n = utf8_valid_len(s, b, &cp)) && is_unicode_whitespace(cp)) b += n;
  while (right && e > b) {
    size_t k = e - 1;
    while (k > b && (uint8_t(s[k]) & 0xC0) == 0x80) --k;
    if (!utf8_valid_len(s, k, &cp) || !is_unicode_whitespace(cp)) break;
    e = k;
  }
  return std::string(s.substr(b, e - b));
}

}  // namespace

std::string replace_all(std::string_view s, std::string_view from, std::string_view to) {
  std::string out;
  out.reserve(s.size() + s.size() / 4);
  size_t pos = 0;
  for (size_t hit; (hit = s.find(from, pos)) != std::string_view::npos; pos = hit + from.size()) {
    out.append(s.substr(pos, hit - pos));
    out.append(to);
  }
  out.append(s.substr(pos));
  return out;
}

Pattern parse_pattern(const json& j, const std::string& file, const std::string& field) {
  Pattern p;
  if (const json* s = json_find(j, "String"); s && s->is_string()) {
    p.literal = s->get<std::string>();
    SINKQ_CHECK(!p.literal.empty(), "{}: {}.String is empty", file, field);
  } else if (const json* r = json_find(j, "Regex"); r && r->is_string()) {
    p.regex = std::make_shared<Regex>(r->get<std::string>(), false, fmt::format("{}: {}.Regex", file, field));
  } else {
    fail("{}: {} must be {{\"String\": ...}} or {{\"Regex\": ...}}", file, field);
  }
  return p;
}

// ---- Normalizer ---------------------------------------------------------------------------------

Normalizer Normalizer::from_json(const json& j, const std::string& file) {
  Normalizer n;
  if (!j.is_null()) n.parse(j, file, "normalizer");
  return n;
}

void Normalizer::parse(const json& j, const std::string& file, const std::string& field) {
  SINKQ_CHECK(j.is_object(), "{}: {} is not an object", file, field);
  const std::string type = json_string(j, "type", file, field);
  if (type == "Sequence") {
    const json* list = json_find(j, "normalizers");
    SINKQ_CHECK(list && list->is_array(), "{}: {}.normalizers is missing or not an array", file, field);
    for (size_t i = 0; i < list->size(); ++i) parse((*list)[i], file, fmt::format("{}.normalizers[{}]", field, i));
  } else if (type == "Prepend") {
    steps_.push_back({Kind::kPrepend, json_string(j, "prepend", file, field), "", nullptr});
  } else if (type == "Replace") {
    const json* pat = json_find(j, "pattern");
    SINKQ_CHECK(pat, "{}: {}.pattern is missing", file, field);
    Pattern p = parse_pattern(*pat, file, field + ".pattern");
    steps_.push_back({Kind::kReplace, p.literal, json_string(j, "content", file, field), p.regex});
  } else if (type == "NFC" || type == "NFD" || type == "NFKC" || type == "NFKD") {
    Step st{Kind::kUnicode, "", "", nullptr};
    st.form = type == "NFC" ? NormForm::kNFC : type == "NFD" ? NormForm::kNFD
            : type == "NFKC" ? NormForm::kNFKC : NormForm::kNFKD;
    steps_.push_back(st);
  } else if (type == "Strip") {
    Step st{Kind::kStrip, "", "", nullptr};
    st.left = json_bool_or(j, "strip_left", true, file, field);
    st.right = json_bool_or(j, "strip_right", true, file, field);
    steps_.push_back(st);
  } else {
    fail("{}: {}.type '{}' is not supported", file, field, type);
  }
}

std::string Normalizer::apply(std::string_view s) const {
  std::string cur(s);
  for (const Step& st : steps_) {
    if (cur.empty()) break;  // every supported step maps "" to "" (Prepend skips empty text)
    switch (st.kind) {
      case Kind::kPrepend:
        cur.insert(0, st.text);
        break;
      case Kind::kReplace:
        if (!st.regex) {
          cur = replace_all(cur, st.text, st.content);
        } else {
          std::string out;
          size_t pos = 0;
          for (auto [b, e] : st.regex->find_all(cur)) {
            out.append(cur, pos, b - pos);
            out.append(st.content);
            pos = e;
          }
          out.append(cur, pos, std::string::npos);
          cur = std::move(out);
        }
        break;
      case Kind::kUnicode:
        cur = unicode_normalize(cur, st.form);
        break;
      case Kind::kStrip:
        cur = strip_whitespace(cur, st.left, st.right);
        break;
    }
  }
  return cur;
}

// ---- PreTokenizer -------------------------------------------------------------------------------

PreTokenizer PreTokenizer::from_json(const json& j, const std::string& file) {
  PreTokenizer p;
  if (!j.is_null()) p.parse(j, file, "pre_tokenizer");
  return p;
}

void PreTokenizer::parse(const json& j, const std::string& file, const std::string& field) {
  SINKQ_CHECK(j.is_object(), "{}: {} is not an object", file, field);
  const std::string type = json_string(j, "type", file, field);
  Step st{};
  if (type == "Sequence") {
    const json* list = json_find(j, "pretokenizers");
    SINKQ_CHECK(list && list->is_array(), "{}: {}.pretokenizers is missing or not an array", file, field);
    for (size_t i = 0; i < list->size(); ++i) parse((*list)[i], file, fmt::format("{}.pretokenizers[{}]", field, i));
    return;
  } else if (type == "Split") {
    st.kind = Kind::kSplit;
    const json* pat = json_find(j, "pattern");
    SINKQ_CHECK(pat, "{}: {}.pattern is missing", file, field);
    Pattern p = parse_pattern(*pat, file, field + ".pattern");
    st.regex = p.regex ? p.regex : std::make_shared<Regex>(p.literal, true, file + ": " + field + ".pattern");
    const std::string b = json_string(j, "behavior", file, field);
    if (b == "Removed") st.behavior = Behavior::kRemoved;
    else if (b == "Isolated") st.behavior = Behavior::kIsolated;
    else if (b == "MergedWithPrevious") st.behavior = Behavior::kMergedWithPrevious;
    else if (b == "MergedWithNext") st.behavior = Behavior::kMergedWithNext;
    else if (b == "Contiguous") st.behavior = Behavior::kContiguous;
    else fail("{}: {}.behavior '{}' is not supported", file, field, b);
    st.invert = json_bool_or(j, "invert", false, file, field);
  } else if (type == "ByteLevel") {
    st.kind = Kind::kByteLevel;
    st.add_prefix_space = json_bool_or(j, "add_prefix_space", true, file, field);
    if (json_bool_or(j, "use_regex", true, file, field)) st.regex = gpt2_regex();
    byte_level_ = true;
  } else if (type == "Metaspace") {
    st.kind = Kind::kMetaspace;
    st.replacement = json_string_or(j, "replacement", "\u2581", file, field);
    SINKQ_CHECK(!st.replacement.empty(), "{}: {}.replacement is empty", file, field);
    // Newer files say prepend_scheme; older ones add_prefix_space (true = "always").
    const std::string scheme = json_string_or(
        j, "prepend_scheme", json_bool_or(j, "add_prefix_space", true, file, field) ? "always" : "never", file, field);
    if (scheme == "never") st.prepend = 0;
    else if (scheme == "first") st.prepend = 1;
    else if (scheme == "always") st.prepend = 2;
    else fail("{}: {}.prepend_scheme '{}' is not supported", file, field, scheme);
    st.split = json_bool_or(j, "split", true, file, field);
  } else if (type == "Digits") {
    st.kind = Kind::kDigits;
    st.individual_digits = json_bool_or(j, "individual_digits", false, file, field);
  } else {
    fail("{}: {}.type '{}' is not supported", file, field, type);
  }
  steps_.push_back(std::move(st));
}

void PreTokenizer::split_by(const Step& st, const std::string& piece, std::vector<std::string>& out) {
  // Spans covering the piece, alternating gaps and matches.
  struct Span {
    size_t b, e;
    bool match;
  };
  std::vector<Span> spans;
  size_t pos = 0;
  for (auto [b, e] : st.regex->find_all(piece)) {
    if (b > pos) spans.push_back({pos, b, st.invert});
    spans.push_back({b, e, !st.invert});
    pos = e;
  }
  if (pos < piece.size()) spans.push_back({pos, piece.size(), st.invert});

  std::vector<std::pair<size_t, size_t>> parts;
  bool prev_match = false;
  switch (st.behavior) {
    case Behavior::kRemoved:
      for (const Span& s : spans) if (!s.match) parts.emplace_back(s.b, s.e);
      break;
    case Behavior::kIsolated:
      for (const Span& s : spans) parts.emplace_back(s.b, s.e);
      break;
    case Behavior::kMergedWithPrevious:  // a match joins the part before it
      for (const Span& s : spans) {
        if (s.match && !prev_match && !parts.empty()) parts.back().second = s.e;
        else parts.emplace_back(s.b, s.e);
        prev_match = s.match;
      }
      break;
    case Behavior::kMergedWithNext:  // a match joins the part after it (scan right to left)
      for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
        if (it->match && !prev_match && !parts.empty()) parts.back().first = it->b;
        else parts.emplace_back(it->b, it->e);
        prev_match = it->match;
      }
      std::reverse(parts.begin(), parts.end());
      break;
    case Behavior::kContiguous:  // consecutive matches form one part
      for (const Span& s : spans) {
        if (s.match && prev_match && !parts.empty()) parts.back().second = s.e;
        else parts.emplace_back(s.b, s.e);
        prev_match = s.match;
      }
      break;
  }
  for (auto [b, e] : parts) {
    if (e > b) out.push_back(piece.substr(b, e - b));
  }
}

void PreTokenizer::apply(std::string_view segment, bool at_input_start, std::vector<std::string>& pieces) const {
  std::vector<std::string> cur{std::string(segment)}, next;
  for (const Step& st : steps_) {
    next.clear();
    for (size_t k = 0; k < cur.size(); ++k) {
      std::string& piece = cur[k];
      if (piece.empty()) continue;
      switch (st.kind) {
        case Kind::kSplit:
          split_by(st, piece, next);
          break;
        case Kind::kByteLevel:
          if (st.add_prefix_space && piece.front() != ' ') piece.insert(0, 1, ' ');
          if (st.regex) split_by(st, piece, next);
          else next.push_back(std::move(piece));
          break;
        case Kind::kMetaspace: {
          std::string s = replace_all(piece, " ", st.replacement);
          bool first = at_input_start && k == 0;
          if ((st.prepend == 2 || (st.prepend == 1 && first)) && s.compare(0, st.replacement.size(), st.replacement) != 0) {
            s.insert(0, st.replacement);
          }
          if (!st.split) {
            next.push_back(std::move(s));
            break;
          }
          size_t b = 0;  // each replacement char starts a new piece (MergedWithNext)
          for (size_t hit; (hit = s.find(st.replacement, b + 1)) != std::string::npos; b = hit) {
            next.push_back(s.substr(b, hit - b));
          }
          next.push_back(s.substr(b));
          break;
        }
        case Kind::kDigits: {
          // Split at every change between numeric and other characters (Unicode numbers, as
          // HF's char::is_numeric: '½' and '²' too), and between numerics when individual.
          size_t b = 0;
          bool prev = false;
          for (size_t i = 0; i < piece.size();) {
            uint32_t cp = 0;
            const size_t n = std::max<size_t>(utf8_valid_len(piece, i, &cp), 1);  // input is valid UTF-8
            const bool num = is_unicode_numeric(cp);
            if (i > 0 && (num != prev || (st.individual_digits && num))) {
              next.push_back(piece.substr(b, i - b));
              b = i;
            }
            prev = num;
            i += n;
          }
          if (b < piece.size()) next.push_back(piece.substr(b));
          break;
        }
      }
    }
    cur.swap(next);
  }
  for (auto& p : cur) {
    if (!p.empty()) pieces.push_back(std::move(p));
  }
}

}  // namespace sinkq::tok
