// sinkq/core/rope.h — the parameters of rotary position embeddings, as plain data: the model
// config (io/config.h) reads them, the kernels (kernels/ops.h RopeTable) build their tables from them.
#pragma once

#include <string>
#include <vector>

namespace sinkq {

// rope_scaling from config.json. type "none" when absent/null. Supported: "llama3" (Llama-3.1
// frequency-dependent scaling), "linear" (positions divided by factor), and "freq_factors":
// sinkq's name for a GGUF file's rope_freqs.weight (llama.cpp's converter writes Llama-3's scaling
// as one divisor per frequency, inv_freq[i] / factors[i]; its parameters are not in the file).
// Others: error.
struct RopeScaling {
  std::string type = "none";
  float factor = 1.0f;
  float low_freq_factor = 1.0f;
  float high_freq_factor = 4.0f;
  int original_max_position_embeddings = 8192;
  std::vector<float> freq_factors;  // "freq_factors": [head_dim / 2]
  bool operator==(const RopeScaling&) const = default;
};

struct RopeParams {
  int head_dim = 0;
  float theta = 10000.0f;
  RopeScaling scaling;
};

}  // namespace sinkq
