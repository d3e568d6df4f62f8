// sinkq/eval/generate.h — token sampling and autoregressive generation.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <random>
#include <span>
#include <vector>

#include "eval/ppl.h"
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
  // -1: no log-probabilities; N >= 0: each emitted token's log-probability under the model's own
  // distribution (the logits before temperature / top-k / top-p) and its N most likely tokens.
  int logprobs = -1;
  // Also score the prompt (echo + logprobs): prompt[i] given prompt[0..i) for i >= 1, with the
  // top `max(logprobs, 0)` alternatives, into GenerateResult::prompt_logprobs, and hand them to
  // on_prompt_logprobs (when set) before the first token is sampled. The prefill then keeps every
  // position's logits (in chunks), so the sampled tokens may differ from a plain prefill's in the
  // last bits of their logits (the lm_head as a GEMM instead of a GEMV).
  bool prompt_logprobs = false;
  std::function<void(const std::vector<TokenLogprob>&)> on_prompt_logprobs;
  // Feeds one sampled token and returns the logits after it; empty = fwd.step({id}). sinkq serve
  // passes its StepBatcher here, which runs the steps of concurrent sessions as one
  // Forward::step_batch (the same logits, bit for bit).
  std::function<std::span<const float>(Forward& fwd, int32_t id)> decode_step;
  // Feeds the prompt to the reset fwd and returns the logits after it; empty = fwd.step(prompt).
  // sinkq serve passes its StepBatcher here (--batch-prefill): the prompt's chunks (step()'s) ride in the same
  // Forward::step_batch as other sessions' decode rows (the same logits, bit for bit). Not used
  // with prompt_logprobs, whose prefill keeps every position's logits.
  std::function<std::span<const float>(Forward& fwd, std::span<const int32_t> prompt)> prefill;
};

struct GenerateResult {
  std::vector<int32_t> generated;  // stop token excluded
  bool stopped = false;            // hit a stop id
  bool cancelled = false;          // on_token returned false
  std::vector<TokenLogprob> logprobs;  // per generated token when opt.logprobs >= 0
  std::vector<TokenLogprob> prompt_logprobs;  // prompt[1..] when opt.prompt_logprobs
  // The stop id that ended generation (stopped) and, when opt.logprobs >= 0, its log-probability:
  // not emitted, but a completion API lists it (lm-eval counts on len(prompt) + max_tokens entries).
  std::optional<TokenLogprob> stop_logprob;
  double prefill_seconds = 0, decode_seconds = 0;
};

// Called for every emitted token (streaming) with its log-probabilities (null unless
// opt.logprobs >= 0); returning false ends the generation after that token (cancelled: a client
// that went away, a stop string).
using OnToken = std::function<bool(int32_t id, const TokenLogprob* logprob)>;

// Prefills `prompt` (must be non-empty) into a reset `fwd`, then samples up to max_new_tokens.
// Throws sinkq::Error if prompt + max_new_tokens exceeds the forward's context.
GenerateResult generate(Forward& fwd, std::span<const int32_t> prompt, const GenerateOptions& opt,
                        const OnToken& on_token = {});

}  // namespace sinkq
