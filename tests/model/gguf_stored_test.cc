// tests/model/gguf_stored_test.cc — a GGUF model held as stored (its ggml blocks, dequantized where
// used; io/weights.h GgufWeights) is the same model as the one dequantized to fp32 at load: the same
// logits bit for bit over a prefill longer than every ISA's GEMV limit and decode steps after it.
// The real SmolLM2 file: Q4_1 blocks with llama.cpp's q/k row permutation (moved as whole blocks).
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "model/model.h"
#include "util/testutil.h"

namespace sinkq {
namespace {

struct EnvGuard {
  explicit EnvGuard(const char* value) { setenv("SINKQ_GGUF_WEIGHTS", value, 1); }
  ~EnvGuard() { unsetenv("SINKQ_GGUF_WEIGHTS"); }
};

std::shared_ptr<const Model> load_as(const std::string& path, const char* mode) {
  EnvGuard env(mode);
  return Model::load(path);
}

TEST(GgufStored, SmolLM2HeldAsStoredGivesTheSameLogits) {
  const std::string path = testing::shared_dir() + "/models/smollm2-135m-instruct-q4_1/model.gguf";
  ASSERT_TRUE(std::filesystem::exists(path)) << path;
  const auto f32 = load_as(path, "f32");
  const auto stored = load_as(path, "stored");
  const auto autom = Model::load(path);  // the default holds the file's blocks
  const auto fit = load_as(path, "fit");  // 0.5 GB as fp32: fit dequantizes at load (≤ 2 GiB)
  EXPECT_EQ(fit->weights().layers[0].mat(0).dtype, DType::F32);
  const ModelConfig& c = f32->config();
  int blocks = 0;
  for (int l = 0; l < c.num_layers; ++l)
    for (int r = 0; r < kNumLinearRoles; ++r) {
      const Mat& a = f32->weights().layers[size_t(l)].mat(r);
      const Mat& b = stored->weights().layers[size_t(l)].mat(r);
      EXPECT_EQ(a.dtype, DType::F32);
      EXPECT_EQ(autom->weights().layers[size_t(l)].mat(r).dtype, b.dtype);
      if (!dtype_is_block(b.dtype)) continue;
      ++blocks;
      // Widening the held blocks gives the loader's fp32 matrix: q / k rows un-permuted as blocks.
      std::vector<float> w(size_t(b.rows * b.cols));
      to_f32(b.dtype, b.data, w.data(), w.size());
      EXPECT_EQ(std::memcmp(w.data(), a.data, w.size() * sizeof(float)), 0) << l << " " << kLinearRoles[r].name;
    }
  EXPECT_EQ(blocks, c.num_layers * kNumLinearRoles);  // every linear of this Q4_1 file
  EXPECT_LT(stored->decode_weight_bytes() * 5, f32->decode_weight_bytes());  // 4.5-5 bits vs 32

  std::vector<int32_t> prompt(80);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = int32_t(1 + (i * 7919) % 49000);
  Forward fa(f32, 96), fb(stored, 96);
  auto same = [&](std::span<const int32_t> toks, const char* what) {
    const auto a = fa.step(toks, true);
    const std::vector<float> av(a.begin(), a.end());
    const auto b = fb.step(toks, true);
    ASSERT_EQ(av.size(), b.size());
    EXPECT_EQ(std::memcmp(av.data(), b.data(), av.size() * sizeof(float)), 0) << what;
  };
  same(prompt, "prefill of 80 tokens");
  for (int32_t t : {42, 4242, 11}) same(std::vector<int32_t>{t}, "decode step");
}

TEST(GgufStored, AnUnknownModeIsNamed) {
  EnvGuard env("fp16");
  const std::string msg = testing::error_of(
      [] { Model::load(testing::shared_dir() + "/models/smollm2-135m-instruct-q4_1/model.gguf"); });
  EXPECT_NE(msg.find("SINKQ_GGUF_WEIGHTS='fp16'"), std::string::npos) << msg;
}

}  // namespace
}  // namespace sinkq
