// sinkq/tokenizer/json_util.h — typed access to tokenizer JSON files with errors that name the
// file and the field (internal header).
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "core/error.h"
#include "tokenizer/added_tokens.h"

namespace sinkq::tok {

// Parses a JSON document; throws "<file>: malformed JSON: ..." on syntax errors and on numbers
// JSON allows but nlohmann cannot hold (out_of_range.406, "number overflow parsing '4E444'": a
// fuzz finding, it escaped as a bare library exception naming no file).
inline nlohmann::json parse_json_file_text(const std::string& text, const std::string& file) {
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    fail("{}: malformed JSON: {}", file, e.what());
  }
}

inline const nlohmann::json* json_find(const nlohmann::json& j, const char* key) {
  if (!j.is_object()) return nullptr;
  auto it = j.find(key);
  return it == j.end() || it->is_null() ? nullptr : &*it;
}

inline std::string json_string(const nlohmann::json& j, const char* key, const std::string& file,
                               const std::string& field) {
  const nlohmann::json* v = json_find(j, key);
  SINKQ_CHECK(v && v->is_string(), "{}: {}.{} is missing or not a string", file, field, key);
  return v->get<std::string>();
}

inline std::string json_string_or(const nlohmann::json& j, const char* key, const std::string& dflt,
                                  const std::string& file, const std::string& field) {
  const nlohmann::json* v = json_find(j, key);
  if (!v) return dflt;
  SINKQ_CHECK(v->is_string(), "{}: {}.{} is not a string", file, field, key);
  return v->get<std::string>();
}

inline bool json_bool_or(const nlohmann::json& j, const char* key, bool dflt, const std::string& file,
                         const std::string& field) {
  const nlohmann::json* v = json_find(j, key);
  if (!v) return dflt;
  SINKQ_CHECK(v->is_boolean(), "{}: {}.{} is not a boolean", file, field, key);
  return v->get<bool>();
}

inline int64_t json_int_or(const nlohmann::json& j, const char* key, int64_t dflt, const std::string& file,
                           const std::string& field) {
  const nlohmann::json* v = json_find(j, key);
  if (!v) return dflt;
  SINKQ_CHECK(v->is_number_integer(), "{}: {}.{} is not an integer", file, field, key);
  return v->get<int64_t>();
}

// The text and flags of one added token, as tokenizer.json's added_tokens[] and
// tokenizer_config.json's added_tokens_decoder{} both spell them. `normalized` defaults to
// !special, as in HF tokenizers.
inline AddedToken added_token_from_json(const nlohmann::json& v, int32_t id, const std::string& file,
                                        const std::string& field) {
  AddedToken t;
  t.id = id;
  t.content = json_string(v, "content", file, field);
  t.special = json_bool_or(v, "special", false, file, field);
  t.lstrip = json_bool_or(v, "lstrip", false, file, field);
  t.rstrip = json_bool_or(v, "rstrip", false, file, field);
  t.single_word = json_bool_or(v, "single_word", false, file, field);
  t.normalized = json_bool_or(v, "normalized", !t.special, file, field);
  return t;
}

}  // namespace sinkq::tok
