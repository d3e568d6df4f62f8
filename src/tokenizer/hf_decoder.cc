// Decoder stage of HF tokenizer.json (see hf_components.h).
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "tokenizer/hf_components.h"
#include "tokenizer/json_util.h"

namespace sinkq::tok {

using nlohmann::json;

namespace {

// "<0xNN>" -> NN, else -1.
int byte_token_value(std::string_view t) {
  if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return -1;
  auto hex = [](char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
  };
  int hi = hex(t[3]), lo = hex(t[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

}  // namespace

// As HF: a token with any char outside the alphabet (e.g. an added
// token's plain text) contributes its UTF-8 bytes unchanged.
void append_byte_level(std::string_view tok, std::string& out) {
  size_t mark = out.size();
  for (size_t i = 0; i < tok.size();) {
    uint32_t cp = 0;
    size_t n = utf8_valid_len(tok, i, &cp);
    int b = n ? byte_level_byte(cp) : -1;
    if (b < 0) {
      out.resize(mark);
      out.append(tok);
      return;
    }
    out += char(b);
    i += n;
  }
}

Decoder Decoder::from_json(const json& j, const std::string& file) {
  Decoder d;
  if (!j.is_null()) {
    d.none_ = false;
    d.parse(j, file, "decoder");
  }
  return d;
}

void Decoder::parse(const json& j, const std::string& file, const std::string& field) {
  SINKQ_CHECK(j.is_object(), "{}: {} is not an object", file, field);
  const std::string type = json_string(j, "type", file, field);
  Step st{};
  if (type == "Sequence") {
    const json* list = json_find(j, "decoders");
    SINKQ_CHECK(list && list->is_array(), "{}: {}.decoders is missing or not an array", file, field);
    for (size_t i = 0; i < list->size(); ++i) parse((*list)[i], file, fmt::format("{}.decoders[{}]", field, i));
    return;
  } else if (type == "Replace") {
    st.kind = Kind::kReplace;
    const json* pat = json_find(j, "pattern");
    SINKQ_CHECK(pat, "{}: {}.pattern is missing", file, field);
    Pattern p = parse_pattern(*pat, file, field + ".pattern");
    st.pattern = p.literal;
    st.regex = p.regex;
    st.content = json_string(j, "content", file, field);
  } else if (type == "ByteFallback") {
    st.kind = Kind::kByteFallback;
  } else if (type == "Fuse") {
    st.kind = Kind::kFuse;
  } else if (type == "Strip") {
    st.kind = Kind::kStrip;
    st.content = json_string(j, "content", file, field);
    st.start = int(json_int_or(j, "start", 0, file, field));
    st.stop = int(json_int_or(j, "stop", 0, file, field));
  } else if (type == "ByteLevel") {
    st.kind = Kind::kByteLevel;
    byte_level_ = true;
  } else if (type == "Metaspace") {
    st.kind = Kind::kMetaspace;
    st.content = json_string_or(j, "replacement", "\u2581", file, field);
    const std::string scheme = json_string_or(
        j, "prepend_scheme", json_bool_or(j, "add_prefix_space", true, file, field) ? "always" : "never", file, field);
    st.prepend = scheme != "never";
  } else {
    fail("{}: {}.type '{}' is not supported", file, field, type);
  }
  steps_.push_back(std::move(st));
}

std::string Decoder::decode(const std::vector<std::string_view>& tokens, bool lossy) const {
  if (none_) {  // HF without a decoder joins the tokens with spaces
    std::string out;
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (i) out += ' ';
      out.append(tokens[i]);
    }
    return out;
  }
  std::vector<std::string> toks(tokens.begin(), tokens.end());
  std::vector<std::string> next;
  for (const Step& st : steps_) {
    switch (st.kind) {
      case Kind::kReplace:
        for (std::string& t : toks) {
          if (!st.regex) {
            t = replace_all(t, st.pattern, st.content);
            continue;
          }
          std::string out;
          size_t pos = 0;
          for (auto [b, e] : st.regex->find_all(t)) {
            out.append(t, pos, b - pos);
            out.append(st.content);
            pos = e;
          }
          t = out + t.substr(pos);
        }
        break;
      case Kind::kByteFallback: {
        // Runs of <0xNN> tokens become their bytes. HF turns a run that is not valid UTF-8 into
        // one U+FFFD per byte; raw mode keeps the bytes (streaming completes them later).
        next.clear();
        std::string run;
        size_t run_len = 0;
        auto flush = [&] {
          if (run_len == 0) return;
          if (!lossy || is_valid_utf8(run)) {
            next.push_back(run);
          } else {
            for (size_t k = 0; k < run_len; ++k) next.emplace_back(kReplacementChar);
          }
          run.clear();
          run_len = 0;
        };
        for (std::string& t : toks) {
          int b = byte_token_value(t);
          if (b >= 0) {
            run += char(b);
            ++run_len;
          } else {
            flush();
            next.push_back(std::move(t));
          }
        }
        flush();
        toks.swap(next);
        break;
      }
      case Kind::kFuse: {
        std::string all;
        for (const std::string& t : toks) all += t;
        toks.assign(1, std::move(all));
        break;
      }
      case Kind::kStrip:
        for (std::string& t : toks) {
          size_t b = 0, e = t.size();
          for (int k = 0; k < st.start && b < e && t.compare(b, st.content.size(), st.content) == 0; ++k) {
            b += st.content.size();
          }
          for (int k = 0; k < st.stop && e >= b + st.content.size() &&
                          t.compare(e - st.content.size(), st.content.size(), st.content) == 0; ++k) {
            e -= st.content.size();
          }
          t = t.substr(b, e - b);
        }
        break;
      case Kind::kByteLevel: {
        std::string bytes;
        for (const std::string& t : toks) append_byte_level(t, bytes);
        toks.assign(1, lossy ? utf8_lossy(bytes) : std::move(bytes));
        break;
      }
      case Kind::kMetaspace:
        for (size_t i = 0; i < toks.size(); ++i) {
          toks[i] = replace_all(toks[i], st.content, " ");
          if (i == 0 && st.prepend && !toks[i].empty() && toks[i][0] == ' ') toks[i].erase(0, 1);
        }
        break;
    }
  }
  std::string out;
  for (const std::string& t : toks) out += t;
  return out;
}

}  // namespace sinkq::tok
