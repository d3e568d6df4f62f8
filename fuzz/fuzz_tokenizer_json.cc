// libFuzzer target: tokenizer.json (HF tokenizers) on arbitrary bytes; an accepted tokenizer
// encodes and decodes a fixed text (fuzz_common.h).
#include "fuzz_common.h"
#include "tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string p = sinkq::fuzz::put("tokenizer.json", data, size);
  sinkq::fuzz::expect_only_sinkq_errors([&] { sinkq::fuzz::exercise(*sinkq::Tokenizer::from_tokenizer_json(p)); });
  return 0;
}
