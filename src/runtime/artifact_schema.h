// sinkq/runtime/artifact_schema.h — the names an artifact directory is made of, shared by the
// writer (artifact_write.cc) and the loader (artifact_read.cc); the layout is in artifact.h.
#pragma once

#include <fmt/format.h>

#include <string>

namespace sinkq::runtime::schema {

inline constexpr const char* kRecipe = "sinkq_recipe.json";
inline constexpr const char* kTensors = "model.safetensors";
inline constexpr const char* kConfig = "config.json";
// Tokenizer (and generation) files copied from the source directory when present.
inline constexpr const char* kTokenizerFiles[] = {"tokenizer.json",          "tokenizer.model",
                                                  "tokenizer_config.json",   "special_tokens_map.json",
                                                  "generation_config.json",  "added_tokens.json",
                                                  "vocab.json",              "merges.txt"};

inline std::string layer_prefix(int l) { return fmt::format("model.layers.{}.", l); }

}  // namespace sinkq::runtime::schema
