// libFuzzer target: config.json (io/config.h) on arbitrary bytes; an accepted config must write
// back and read back to itself (ModelConfig::to_json).
#include "fuzz_common.h"
#include <nlohmann/json.hpp>

#include "io/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string p = sinkq::fuzz::put("config.json", data, size);
  sinkq::fuzz::expect_only_sinkq_errors([&] {
    const sinkq::ModelConfig c = sinkq::ModelConfig::load(p);
    if (!(sinkq::ModelConfig::from_json(c.to_json(), p) == c)) std::abort();
  });
  return 0;
}
