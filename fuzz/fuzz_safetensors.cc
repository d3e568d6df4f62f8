// libFuzzer target: the safetensors reader (io/safetensors.h) on arbitrary bytes, then every
// tensor's bytes read (a checksum) to prove the spans it returns lie inside the mapping.
#include "core/checksum.h"
#include "fuzz_common.h"
#include "io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string p = sinkq::fuzz::put("model.safetensors", data, size);
  sinkq::fuzz::expect_only_sinkq_errors([&] {
    const auto f = sinkq::SafetensorsFile::open(p, /*allow_raw=*/true);
    for (const sinkq::TensorInfo& t : f->tensors()) (void)sinkq::checksum({t.data, t.nbytes});
  });
  return 0;
}
