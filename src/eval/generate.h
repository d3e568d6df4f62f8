// sinkq/eval/generate.h — token sampling and autoregressive generation.
#pragma once

#include <cstdint>
#include <functional>
#include <random>
#include <span>
#include <vector>

#include "model/model.h"

namespace sinkq {

struct SamplerOptions {
  float temperature = 0.8f;  // 0 = greedy (argmax; the lowest id wins a tie)
  int top_k = 0;             // 0 = off
  float top_p = 1.0f;        // 1 = off; nucleus over the top-k survivors
  uint64_t seed = 0;
};

// Validates options (temperature ≥ 0, top_k ≥ 0, 0 < top_p ≤ 1) and names the offending flag.
void validate(const SamplerOptions& o);

class Sampler {
 public:
  explicit Sampler(const SamplerOptions& o);
  // Picks a token from logits[vocab]. Order: temperature → top-k → softmax → top-p → draw.
  int32_t sample(std::span<const float> logits);

 private:
  SamplerOptions o_;
  std::mt19937_64 rng_;
  std::vector<std::pair<float, int32_t>> cand_;
};

struct GenerateOptions {
  int64_t max_new_tokens = 64;
  SamplerOptions sampler;
  std::vector<int32_t> stop_ids;  // generation ends after producing one of these (not emitted)
};

struct GenerateResult {
  std::vector<int32_t> generated;  // stop token excluded
  bool stopped = false;            // hit a stop id
  bool cancelled = false;          // on_token returned false
  double prefill_seconds = 0, decode_seconds = 0;
};

// Prefills `prompt` (must be non-empty) into a reset `fwd`, then samples up to max_new_tokens.
// on_token(id) is called for every emitted token (for streaming); returning false ends the
// generation after that token (cancelled: a client that went away). Throws sinkq::Error if
// prompt + max_new_tokens exceeds the forward's context.
GenerateResult generate(Forward& fwd, std::span<const int32_t> prompt, const GenerateOptions& opt,
                        const std::function<bool(int32_t)>& on_token = {});

}  // namespace sinkq
