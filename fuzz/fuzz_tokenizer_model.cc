// libFuzzer target: a sentencepiece tokenizer.model (protobuf, parsed by libsentencepiece after
// sinkq's own checks) on arbitrary bytes; an accepted model encodes and decodes a fixed text.
#include "fuzz_common.h"
#include "tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string p = sinkq::fuzz::put("tokenizer.model", data, size);
  sinkq::fuzz::expect_only_sinkq_errors([&] { sinkq::fuzz::exercise(*sinkq::Tokenizer::from_sentencepiece(p)); });
  return 0;
}
