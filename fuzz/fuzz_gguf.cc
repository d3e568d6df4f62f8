// libFuzzer target: the GGUF reader (io/gguf.h) on arbitrary bytes, then what sinkq derives from
// an accepted file: the model config (when it has the llama keys) and the tokenizer from its
// tokenizer.ggml.* metadata, which encodes and decodes a fixed text.
#include "fuzz_common.h"
#include "io/gguf.h"
#include "io/weights.h"
#include "tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string p = sinkq::fuzz::put("model.gguf", data, size);
  sinkq::fuzz::expect_only_sinkq_errors([&] {
    const auto g = sinkq::GgufFile::open(p);
    for (const sinkq::GgufTensor& t : g->tensors()) (void)t.shape_str();
    sinkq::fuzz::expect_only_sinkq_errors([&] { (void)sinkq::model_config_from_gguf(*g); });
    const auto t = sinkq::Tokenizer::from_gguf_metadata(g->metadata(), p);
    const std::vector<int32_t> ids = t->encode("Hello  world, 1234 caf\u00e9 \u4e2d\u6587 <s>\n");
    (void)t->decode(ids);
  });
  return 0;
}
