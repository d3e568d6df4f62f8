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
    sinkq::fuzz::exercise(*sinkq::Tokenizer::from_gguf_metadata(g->metadata(), p));
  });
  return 0;
}
