// sinkq/tokenizer/tokenizer_impl.h — factories of the Tokenizer implementations (internal header).
#pragma once

#include <memory>
#include <string>

#include "tokenizer/tokenizer.h"

namespace sinkq::tok {

// HF tokenizers tokenizer.json (+ tokenizer_config.json / config.json beside it).
std::unique_ptr<Tokenizer> make_hf_tokenizer(const std::string& path);
// sentencepiece tokenizer.model (+ tokenizer_config.json / config.json beside it).
std::unique_ptr<Tokenizer> make_sp_tokenizer(const std::string& path);

}  // namespace sinkq::tok
