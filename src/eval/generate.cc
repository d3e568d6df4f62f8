#include "eval/generate.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "core/error.h"

namespace sinkq {

void validate(const SamplerOptions& o) {
  SINKQ_CHECK(std::isfinite(o.temperature) && o.temperature >= 0, "--temp must be >= 0 (got {})", o.temperature);
  SINKQ_CHECK(o.top_k >= 0, "--top-k must be >= 0 (got {})", o.top_k);
  SINKQ_CHECK(o.top_p > 0 && o.top_p <= 1, "--top-p must be in (0, 1] (got {})", o.top_p);
}

Sampler::Sampler(const SamplerOptions& o) : o_(o), rng_(o.seed) { validate(o); }

int32_t Sampler::sample(std::span<const float> logits) {
  const int64_t V = int64_t(logits.size());
  for (int64_t i = 0; i < V; ++i)
    SINKQ_CHECK(std::isfinite(logits[size_t(i)]),
                "the logit of token {} is {}: the model's weights are NaN / Inf or overflow (nothing to sample from)", i,
                logits[size_t(i)]);
  if (o_.temperature == 0.0f) {
    return int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
  }
  cand_.resize(size_t(V));
  // (logit − max) / T: the largest is 0 and the others ≤ 0 for any T > 0 — a tiny T (1e-40) sends
  // them to −inf (exp 0: greedy) instead of dividing the logits themselves to ±inf (inf − inf = nan).
  const double top = double(*std::max_element(logits.begin(), logits.end()));
  for (int64_t i = 0; i < V; ++i)
    cand_[size_t(i)] = {float((double(logits[size_t(i)]) - top) / double(o_.temperature)), int32_t(i)};
  auto by_logit = [](const auto& a, const auto& b) { return a.first > b.first || (a.first == b.first && a.second < b.second); };
  size_t n = cand_.size();
  if (o_.top_k > 0 && size_t(o_.top_k) < n) {
    n = size_t(o_.top_k);
    std::partial_sort(cand_.begin(), cand_.begin() + long(n), cand_.end(), by_logit);
  } else {
    std::sort(cand_.begin(), cand_.end(), by_logit);
  }
  // Softmax over the survivors (sorted, so the max is first).
  const float mx = cand_[0].first;
  double sum = 0;
  for (size_t i = 0; i < n; ++i) {
    cand_[i].first = std::exp(cand_[i].first - mx);
    sum += cand_[i].first;
  }
  if (o_.top_p < 1.0f) {
    double cum = 0;
    size_t keep = 0;
    while (keep < n) {
      cum += cand_[keep].first / sum;
      ++keep;
      if (cum >= o_.top_p) break;
    }
    n = keep;
    sum = 0;
    for (size_t i = 0; i < n; ++i) sum += cand_[i].first;
  }
  const double r = std::uniform_real_distribution<double>(0.0, sum)(rng_);
  double acc = 0;
  for (size_t i = 0; i < n; ++i) {
    acc += cand_[i].first;
    if (r < acc) return cand_[i].second;
  }
  return cand_[n - 1].second;
}

GenerateResult generate(Forward& fwd, std::span<const int32_t> prompt, const GenerateOptions& opt,
                        const OnToken& on_token) {
  SINKQ_CHECK(!prompt.empty(), "the prompt is empty: nothing to condition on (a tokenizer without BOS needs text)");
  SINKQ_CHECK(opt.max_new_tokens >= 0, "-n must be >= 0 (got {})", opt.max_new_tokens);
  SINKQ_CHECK(opt.logprobs >= -1, "logprobs must be >= 0 (got {})", opt.logprobs);
  SINKQ_CHECK(int64_t(prompt.size()) + opt.max_new_tokens <= fwd.max_ctx(),
              "prompt ({} tokens) + -n {} exceeds the context of {} tokens", prompt.size(),
              opt.max_new_tokens, fwd.max_ctx());
  using clock = std::chrono::steady_clock;
  Sampler sampler(opt.sampler);
  GenerateResult r;
  fwd.reset();
  if (opt.max_new_tokens == 0 && !opt.prompt_logprobs) return r;
  auto t0 = clock::now();
  std::span<const float> logits =
      opt.prompt_logprobs ? feed_scored(fwd, prompt, 1, std::max(opt.logprobs, 0), r.prompt_logprobs)
                          : opt.prefill ? opt.prefill(fwd, prompt) : fwd.step(prompt, /*all_logits=*/false);
  auto t1 = clock::now();
  r.prefill_seconds = std::chrono::duration<double>(t1 - t0).count();
  if (opt.on_prompt_logprobs) opt.on_prompt_logprobs(r.prompt_logprobs);
  for (int64_t i = 0; i < opt.max_new_tokens; ++i) {
    const int32_t id = sampler.sample(logits);
    if (std::find(opt.stop_ids.begin(), opt.stop_ids.end(), id) != opt.stop_ids.end()) {
      r.stopped = true;
      if (opt.logprobs >= 0) r.stop_logprob = token_logprob(logits.data(), int64_t(logits.size()), id, opt.logprobs);
      break;
    }
    r.generated.push_back(id);
    const TokenLogprob* lp = nullptr;
    if (opt.logprobs >= 0) {
      r.logprobs.push_back(token_logprob(logits.data(), int64_t(logits.size()), id, opt.logprobs));
      lp = &r.logprobs.back();
    }
    if (on_token && !on_token(id, lp)) {
      r.cancelled = true;
      break;
    }
    if (i + 1 < opt.max_new_tokens)
      logits = opt.decode_step ? opt.decode_step(fwd, id) : fwd.step(std::span(&id, 1), /*all_logits=*/false);
  }
  r.decode_seconds = std::chrono::duration<double>(clock::now() - t1).count();
  return r;
}

}  // namespace sinkq
