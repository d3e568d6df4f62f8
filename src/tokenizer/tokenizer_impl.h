// sinkq/tokenizer/tokenizer_impl.h — factories of the Tokenizer implementations (internal header).
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <memory>
#include <string>
#include <string_view>

#include "tokenizer/special_config.h"
#include "tokenizer/tokenizer.h"

namespace sinkq::tok {

// HF tokenizers tokenizer.json (+ tokenizer_config.json / config.json beside it).
std::unique_ptr<Tokenizer> make_hf_tokenizer(const std::string& path);
// The same from a parsed tokenizer.json document and the settings that would come from the files
// beside it; `source` names the document in errors. make_hf_tokenizer is this plus the file reads.
std::unique_ptr<Tokenizer> make_hf_tokenizer_from_json(const nlohmann::json& doc, const SpecialConfig& sc,
                                                       const std::string& source);
// sentencepiece tokenizer.model (+ tokenizer_config.json / config.json beside it).
std::unique_ptr<Tokenizer> make_sp_tokenizer(const std::string& path);
// The same from a serialized sentencepiece ModelProto; `source` names it in errors.
std::unique_ptr<Tokenizer> make_sp_tokenizer_from_proto(std::string_view serialized, const SpecialConfig& sc,
                                                        const std::string& source);
// GGUF tokenizer metadata (tokenizer.ggml.* keys): builds a tokenizer.json document (gpt2) or a
// sentencepiece ModelProto (llama) and hands it to one of the factories above.
std::unique_ptr<Tokenizer> make_gguf_tokenizer(const nlohmann::json& meta, const std::string& source);

}  // namespace sinkq::tok
