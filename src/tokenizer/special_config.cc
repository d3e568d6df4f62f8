#include "tokenizer/special_config.h"

#include <sys/stat.h>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/mmap.h"
#include "tokenizer/json_util.h"

namespace sinkq::tok {

using nlohmann::json;

namespace {

// bos_token / eos_token: "…", {"content": "…", ...} (AddedToken form) or null.
std::optional<std::string> token_string(const json& cfg, const char* key, const std::string& file) {
  const json* v = json_find(cfg, key);
  if (!v) return std::nullopt;
  if (v->is_string()) return v->get<std::string>();
  if (v->is_object()) return json_string(*v, "content", file, key);
  fail("{}: {} must be a string, an object with \"content\", or null", file, key);
}

std::optional<int32_t> token_id(const json& cfg, const char* key, const std::string& file) {
  const json* v = json_find(cfg, key);
  if (!v) return std::nullopt;
  if (v->is_array()) {  // e.g. Llama-3.1 eos_token_id: [128001, 128008, 128009]
    if (v->empty()) return std::nullopt;
    v = &(*v)[0];
  }
  SINKQ_CHECK(v->is_number_integer(), "{}: {} must be an integer or a list of integers", file, key);
  return v->get<int32_t>();
}

}  // namespace

std::string dir_of(const std::string& path) {
  size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

bool file_exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

SpecialConfig read_special_config(const std::string& dir) {
  SpecialConfig sc;
  const std::string tc_path = dir + "/tokenizer_config.json";
  if (file_exists(tc_path)) {
    json tc = parse_json_file_text(read_file(tc_path), tc_path);
    SINKQ_CHECK(tc.is_object(), "{}: not a JSON object", tc_path);
    if (const json* v = json_find(tc, "add_bos_token")) {
      SINKQ_CHECK(v->is_boolean(), "{}: add_bos_token is not a boolean", tc_path);
      sc.add_bos = v->get<bool>();
    }
    if (const json* v = json_find(tc, "add_eos_token")) {
      SINKQ_CHECK(v->is_boolean(), "{}: add_eos_token is not a boolean", tc_path);
      sc.add_eos = v->get<bool>();
    }
    if (const json* v = json_find(tc, "chat_template"); v && v->is_string()) sc.chat_template = v->get<std::string>();
    sc.bos_token = token_string(tc, "bos_token", tc_path);
    sc.eos_token = token_string(tc, "eos_token", tc_path);
    if (const json* atd = json_find(tc, "added_tokens_decoder")) {
      SINKQ_CHECK(atd->is_object(), "{}: added_tokens_decoder is not an object", tc_path);
      for (const auto& [key, v] : atd->items()) {
        const std::string field = "added_tokens_decoder." + key;
        int32_t id = -1;
        try {
          id = std::stoi(key);
        } catch (const std::exception&) {
          fail("{}: {}: key is not a token id", tc_path, field);
        }
        sc.added_tokens_decoder.push_back(added_token_from_json(v, id, tc_path, field));
      }
    }
  }
  const std::string cfg_path = dir + "/config.json";
  if (file_exists(cfg_path)) {
    json cfg = parse_json_file_text(read_file(cfg_path), cfg_path);
    SINKQ_CHECK(cfg.is_object(), "{}: not a JSON object", cfg_path);
    sc.bos_id = token_id(cfg, "bos_token_id", cfg_path);
    sc.eos_id = token_id(cfg, "eos_token_id", cfg_path);
  }
  return sc;
}

int32_t resolve_special_id(const std::optional<std::string>& token,
                           const std::function<int32_t(std::string_view)>& lookup,
                           std::initializer_list<std::optional<int32_t>> fallbacks) {
  if (token) {
    int32_t id = lookup(*token);
    if (id >= 0) return id;
  }
  for (const auto& f : fallbacks) {
    if (f && *f >= 0) return *f;
  }
  return -1;
}

}  // namespace sinkq::tok
