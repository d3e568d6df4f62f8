// libFuzzer target: tokenizer.json (HF tokenizers) on arbitrary bytes; an accepted tokenizer
// encodes and decodes a fixed text (ASCII, digits, accents, CJK, emoji, an added-token spelling).
#include "fuzz_common.h"
#include "tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string p = sinkq::fuzz::put("tokenizer.json", data, size);
  sinkq::fuzz::expect_only_sinkq_errors([&] {
    const auto t = sinkq::Tokenizer::from_tokenizer_json(p);
    const std::vector<int32_t> ids = t->encode("Hello  world, 1234 caf\u00e9 \u4e2d\u6587 \U0001F600 <s></s>\n\tend");
    (void)t->decode(ids);
    (void)t->decode_bytes(ids, false);
  });
  return 0;
}
