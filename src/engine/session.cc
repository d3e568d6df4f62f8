// sinkq/engine/session.cc — Session (include/sinkq/engine.h): one sequence over an Engine, its own
// Forward behind the engine's prefix; scoring, generation and perplexity on it.
#include <fmt/format.h>

#include "core/error.h"
#include "dist/pipeline.h"
#include "sinkq/engine.h"

namespace sinkq {

namespace {

void check_ids(std::span<const int32_t> tokens, int64_t vocab) {
  for (int32_t t : tokens) SINKQ_CHECK(t >= 0 && t < vocab, "token id {} is outside the vocabulary (0..{})", t, vocab - 1);
}

}  // namespace

Session::Session(std::shared_ptr<const Engine> engine, int64_t ctx) : engine_(std::move(engine)) {
  SINKQ_ASSERT(engine_ != nullptr);
  SINKQ_CHECK(ctx >= 1 && ctx <= engine_->max_context(),
              "a session of {} positions does not fit: the model has {} positions{}, so 1..{} are left", ctx,
              engine_->config().max_position_embeddings,
              engine_->prefix_size() ? fmt::format(" and a {}-token prefix", engine_->prefix_size()) : "",
              engine_->max_context());
  fwd_ = std::make_unique<Forward>(engine_->model(), ctx);
  engine_->attach(*fwd_);
}

int64_t Session::capacity() const { return fwd_->body_capacity(); }
int64_t Session::n_past() const { return fwd_->body_size(); }
void Session::reset() { fwd_->reset(); }
size_t Session::kv_bytes() const { return fwd_->kv_bytes(); }

std::span<const float> Session::eval(std::span<const int32_t> tokens) {
  SINKQ_CHECK(!tokens.empty(), "Session::eval: no tokens");
  SINKQ_CHECK(n_past() + int64_t(tokens.size()) <= capacity(),
              "{} tokens after {} do not fit the session's {} positions", tokens.size(), n_past(), capacity());
  check_ids(tokens, engine_->config().vocab_size);
  return fwd_->step(tokens, /*all_logits=*/false);
}

std::vector<TokenLogprob> Session::score(std::span<const int32_t> tokens, int64_t from, int top_n) {
  const int64_t n = int64_t(tokens.size());
  SINKQ_CHECK(from >= 1 && from <= n, "Session::logprobs: from = {} must be in 1..{} (the first token has no "
              "context in the sequence)", from, n);
  SINKQ_CHECK(n <= capacity(), "{} tokens do not fit the session's {} positions", n, capacity());
  SINKQ_CHECK(top_n >= 0, "Session::score: top_n = {} must be >= 0", top_n);
  const int64_t vocab = engine_->config().vocab_size;
  check_ids(tokens, vocab);
  reset();
  std::vector<TokenLogprob> out;
  out.reserve(size_t(n - from));
  feed_scored(*fwd_, tokens, from, top_n, out);
  return out;
}

std::vector<double> Session::logprobs(std::span<const int32_t> tokens, int64_t from) {
  std::vector<double> out;
  for (const TokenLogprob& t : score(tokens, from, 0)) out.push_back(t.logprob);
  return out;
}

GenerateResult Session::generate(std::span<const int32_t> prompt, const GenerateOptions& opt,
                                 const OnToken& on_token) {
  return sinkq::generate(*fwd_, prompt, opt, on_token);
}

PplResult Session::perplexity(const std::vector<int32_t>& tokens, const PplOptions& opt, Session* reference) {
  if (engine_->distributed())
    return dist::pipeline_perplexity(*fwd_, tokens, opt, reference ? reference->fwd_.get() : nullptr);
  return sinkq::perplexity(*fwd_, tokens, opt, reference ? reference->fwd_.get() : nullptr);
}

}  // namespace sinkq
