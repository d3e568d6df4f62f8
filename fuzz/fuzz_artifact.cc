// libFuzzer target: the artifact loader (runtime/artifact.h). The input replaces one file of a
// real artifact (SINKQ_FUZZ_ARTIFACT: a directory written by sinkq quantize; the other files are
// linked in): sinkq_recipe.json when SINKQ_FUZZ_FILE is unset or "recipe", model.safetensors when
// it is "tensors".
#include <cstdlib>
#include <filesystem>

#include "fuzz_common.h"
#include "runtime/artifact.h"

namespace {
namespace fs = std::filesystem;
std::string g_dir, g_file;
}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const char* src = std::getenv("SINKQ_FUZZ_ARTIFACT");
  if (!src || !fs::is_directory(src)) {
    std::fprintf(stderr, "fuzz_artifact: set SINKQ_FUZZ_ARTIFACT to an artifact directory\n");
    std::exit(2);
  }
  const char* which = std::getenv("SINKQ_FUZZ_FILE");
  g_file = which && std::string(which) == "tensors" ? "model.safetensors" : "sinkq_recipe.json";
  g_dir = sinkq::fuzz::scratch() + "/artifact";
  fs::create_directories(g_dir);
  for (const auto& e : fs::directory_iterator(src))
    if (e.path().filename() != g_file) fs::create_symlink(fs::absolute(e.path()), g_dir + "/" + e.path().filename().string());
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  (void)sinkq::fuzz::put("artifact/" + g_file, data, size);
  sinkq::fuzz::expect_only_sinkq_errors([&] { (void)sinkq::runtime::load_artifact(g_dir); });
  return 0;
}
