// sinkq/runtime/artifact_schema.h — the names an artifact directory is made of, shared by the
// writer (artifact_write.cc) and the loader (artifact_read.cc); the layout is in artifact.h.
#pragma once

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "core/checksum.h"

namespace sinkq::runtime::schema {

inline constexpr const char* kRecipe = "sinkq_recipe.json";
inline constexpr const char* kTensors = "model.safetensors";
inline constexpr const char* kConfig = "config.json";
// Tokenizer (and generation) files copied from the source directory when present.
inline constexpr const char* kTokenizerFiles[] = {"tokenizer.json",          "tokenizer.model",
                                                  "tokenizer_config.json",   "special_tokens_map.json",
                                                  "generation_config.json",  "added_tokens.json",
                                                  "vocab.json",              "merges.txt"};

// A GGUF source's tokenizer (its tokenizer.* metadata in a tensor-less GGUF file).
inline constexpr const char* kTokenizerGguf = "tokenizer.gguf";

// Every file besides the three above that the loader may read: each is checksummed into the
// recipe's "files" object, which recipe_checksum binds.
inline std::vector<std::string> side_files() {
  std::vector<std::string> f(std::begin(kTokenizerFiles), std::end(kTokenizerFiles));
  f.emplace_back(kTokenizerGguf);
  return f;
}

inline std::string layer_prefix(int l) { return fmt::format("model.layers.{}.", l); }

// A tensor's checksum binds its bytes to its dtype and shape (seeded by "DTYPE[d0,d1,..]"): a
// tensor relabelled in the header (f16 read as bf16) fails it although its bytes are unchanged.
inline std::string tensor_checksum(std::string_view dtype, const std::vector<int64_t>& shape,
                                   std::span<const std::byte> bytes) {
  return checksum(bytes, checksum_seed(fmt::format("{}[{}]", dtype, fmt::join(shape, ","))));
}

// What decides how the packed tensors run, beside config.json: recorded in model.safetensors'
// __metadata__ as "recipe_checksum", so that a recipe edited after quantize (rotation switched on,
// activation bits changed: both leave every tensor's layout as it was) no longer loads.
inline std::string recipe_checksum(const nlohmann::json& recipe_file) {
  nlohmann::json bound{{"format_version", recipe_file.at("format_version")},
                             {"config_checksum", recipe_file.at("config_checksum")},
                             {"lm_head_tied", recipe_file.at("lm_head_tied")},
                             {"fp_dtype", recipe_file.at("fp_dtype")},
                             {"recipe", recipe_file.at("recipe")}};
  // Artifacts written before the tokenizer files were checksummed have no "files" (and load as
  // before); in a newer one, removing it changes this checksum.
  if (recipe_file.contains("files")) bound["files"] = recipe_file.at("files");
  return checksum(bound.dump());
}

}  // namespace sinkq::runtime::schema
