// sinkq/tokenizer/special_config.h — BOS/EOS settings from tokenizer_config.json and config.json
// beside a tokenizer file (internal header).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/added_tokens.h"

namespace sinkq::tok {

struct SpecialConfig {
  // tokenizer_config.json (all optional)
  std::optional<bool> add_bos, add_eos;
  std::optional<std::string> bos_token, eos_token;  // a string or {"content": ...}
  std::vector<AddedToken> added_tokens_decoder;     // "added_tokens_decoder": {"id": {...}}
  std::optional<std::string> chat_template;         // when a single string (not a list of named ones)
  // config.json (optional): bos_token_id, eos_token_id (a list: its first entry)
  std::optional<int32_t> bos_id, eos_id;
};

// Reads dir/tokenizer_config.json and dir/config.json when present. Throws sinkq::Error naming the
// file and field if a present file is malformed.
SpecialConfig read_special_config(const std::string& dir);

// The id of a special token: the token string from tokenizer_config.json looked up with
// `lookup` (-1 = absent), else `fallback` ids in order (first >= 0 wins), else -1.
int32_t resolve_special_id(const std::optional<std::string>& token,
                           const std::function<int32_t(std::string_view)>& lookup,
                           std::initializer_list<std::optional<int32_t>> fallbacks);

// Directory part of a path ("." when none).
std::string dir_of(const std::string& path);
bool file_exists(const std::string& path);

}  // namespace sinkq::tok
