#include "eval/ppl.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/mmap.h"
#include "tokenizer/tokenizer.h"

namespace sinkq {

const char* ppl_protocol_name(PplProtocol p) {
  switch (p) {
    case PplProtocol::Gptq: return "gptq";
    case PplProtocol::Bos: return "bos";
    case PplProtocol::Prefix: return "prefix";
    case PplProtocol::LlamaCpp: return "llamacpp";
  }
  return "?";
}

PplProtocol parse_ppl_protocol(const std::string& s) {
  if (s == "gptq") return PplProtocol::Gptq;
  if (s == "bos") return PplProtocol::Bos;
  if (s == "prefix") return PplProtocol::Prefix;
  if (s == "llamacpp") return PplProtocol::LlamaCpp;
  fail("unknown perplexity protocol '{}' (--protocol): expected gptq, bos, prefix or llamacpp", s);
}

double logsumexp(const float* logits, int64_t vocab) {
  double mx = logits[0];
  for (int64_t i = 1; i < vocab; ++i) mx = std::max(mx, double(logits[i]));
  double sum = 0;
  for (int64_t i = 0; i < vocab; ++i) sum += std::exp(double(logits[i]) - mx);
  return mx + std::log(sum);
}

double token_nll(const float* logits, int64_t vocab, int32_t target) {
  return logsumexp(logits, vocab) - double(logits[target]);
}

TokenLogprob token_logprob(const float* logits, int64_t vocab, int32_t id, int top_n) {
  SINKQ_ASSERT(id >= 0 && id < vocab && top_n >= 0);
  const double lse = logsumexp(logits, vocab);
  TokenLogprob r;
  r.id = id;
  r.logprob = -(lse - double(logits[id]));  // = −token_nll bit for bit
  const size_t n = size_t(std::min<int64_t>(top_n, vocab));
  if (n == 0) return r;
  // The n largest in one pass, kept sorted (n <= 20 in every caller: no vocab-sized buffer or sort
  // per scored position). Ids go up, and only a strictly larger logit moves ahead: a tie keeps the
  // lower id first.
  std::vector<std::pair<float, int32_t>> best;
  best.reserve(n + 1);
  for (int64_t i = 0; i < vocab; ++i) {
    const float v = logits[i];
    if (best.size() == n && !(v > best.back().first)) continue;
    auto at = std::upper_bound(best.begin(), best.end(), v, [](float x, const auto& b) { return x > b.first; });
    best.insert(at, {v, int32_t(i)});
    if (best.size() > n) best.pop_back();
  }
  r.top.reserve(n);
  for (const auto& [v, i] : best) r.top.emplace_back(i, -(lse - double(v)));
  return r;
}

std::span<const float> feed_scored(Forward& fwd, std::span<const int32_t> tokens, int64_t from, int top_n,
                                   std::vector<TokenLogprob>& out, int64_t chunk) {
  const int64_t n = int64_t(tokens.size());
  SINKQ_ASSERT(from >= 1 && from <= n && chunk >= 1);
  const int64_t V = fwd.model().config().vocab_size;
  // Tokens before from − 1 predict nothing that is scored: one step without logits kept.
  int64_t at = from - 1;
  std::span<const float> logits;
  if (at > 0) logits = fwd.step(tokens.first(size_t(at)), /*all_logits=*/false);
  if (from == n) return at == n ? logits : fwd.step(tokens.subspan(size_t(at)), /*all_logits=*/false);
  while (at < n) {
    const int64_t len = std::min(chunk, n - at);
    logits = fwd.step(tokens.subspan(size_t(at), size_t(len)), /*all_logits=*/true);
    for (int64_t r = 0; r < len && at + r + 1 < n; ++r)
      out.push_back(token_logprob(logits.data() + r * V, V, tokens[size_t(at + r + 1)], top_n));
    at += len;
  }
  return logits.subspan(logits.size() - size_t(V));
}

double token_kld(const float* p_logits, const float* q_logits, int64_t vocab) {
  const double lp = logsumexp(p_logits, vocab), lq = logsumexp(q_logits, vocab);
  double kl = 0;
  for (int64_t i = 0; i < vocab; ++i) {
    const double log_p = double(p_logits[i]) - lp, log_q = double(q_logits[i]) - lq;
    kl += std::exp(log_p) * (log_p - log_q);
  }
  return std::max(0.0, kl);
}

std::vector<std::vector<int32_t>> ppl_windows(const std::vector<int32_t>& toks, const PplOptions& opt) {
  SINKQ_CHECK(opt.ctx >= 2, "perplexity context must be at least 2 tokens (got {})", opt.ctx);
  std::vector<std::vector<int32_t>> windows;
  const size_t ctx = size_t(opt.ctx);
  // llamacpp without BOS (a tokenizer that adds none, as llama.cpp's vocab says): plain chunks.
  const bool plain_chunks = opt.protocol == PplProtocol::LlamaCpp && !opt.add_bos;
  if (opt.protocol == PplProtocol::Gptq || opt.protocol == PplProtocol::Prefix || plain_chunks) {
    std::vector<int32_t> stream;
    stream.reserve(toks.size() + 1);
    if (opt.protocol == PplProtocol::Gptq && opt.add_bos) {
      SINKQ_CHECK(opt.bos_id >= 0, "the tokenizer adds BOS but has no BOS id");
      stream.push_back(opt.bos_id);
    }
    stream.insert(stream.end(), toks.begin(), toks.end());
    for (size_t k = 0; (k + 1) * ctx <= stream.size(); ++k) {
      if (opt.max_windows > 0 && int64_t(k) >= opt.max_windows) break;
      windows.emplace_back(stream.begin() + long(k * ctx), stream.begin() + long((k + 1) * ctx));
    }
  } else {
    SINKQ_CHECK(opt.bos_id >= 0, "protocol '{}' needs a BOS token, and this tokenizer has none",
                ppl_protocol_name(opt.protocol));
    // bos: BOS + the next ctx − 1 tokens; llamacpp (a tokenizer that adds BOS): chunk k of
    // [BOS] + toks (ctx tokens from toks[ctx·k − 1]) with its first token replaced by BOS, i.e.
    // BOS + toks[ctx·k, ctx·k + ctx − 1).
    const size_t body = ctx - 1, stride = opt.protocol == PplProtocol::LlamaCpp ? ctx : body;
    for (size_t k = 0; k * stride + body <= toks.size(); ++k) {
      if (opt.max_windows > 0 && int64_t(k) >= opt.max_windows) break;
      std::vector<int32_t> w{opt.bos_id};
      w.insert(w.end(), toks.begin() + long(k * stride), toks.begin() + long(k * stride + body));
      windows.push_back(std::move(w));
    }
  }
  return windows;
}

int64_t ppl_first_scored(const PplOptions& opt) { return opt.protocol == PplProtocol::LlamaCpp ? opt.ctx / 2 : 0; }

void check_ppl_text(const std::vector<int32_t>& toks, const PplOptions& opt) {
  PplOptions one = opt;
  one.max_windows = 1;
  SINKQ_CHECK(!ppl_windows(toks, one).empty(),
              "the text has {} tokens: too short for one window of {} tokens (protocol {})",
              toks.size(), opt.ctx, ppl_protocol_name(opt.protocol));
}

void check_ppl_forward(const Forward& fwd, const PplOptions& opt, const Forward* reference) {
  SINKQ_CHECK(opt.ctx <= fwd.max_ctx() - fwd.prefix_size(),
              "perplexity context {} (--ctx) is longer than the {} positions left after a prefix of {}", opt.ctx,
              fwd.max_ctx() - fwd.prefix_size(), fwd.prefix_size());
  auto check_prefix = [&](const Forward& f, const char* which) {
    if (opt.protocol == PplProtocol::Prefix)
      SINKQ_CHECK(f.prefix_size() > 0, "protocol 'prefix' needs a KV prefix on the {} forward (--prefix)", which);
    else
      SINKQ_CHECK(f.prefix_size() == 0, "the {} forward has a KV prefix of {} tokens: use --protocol prefix", which,
                  f.prefix_size());
  };
  check_prefix(fwd, "evaluated");
  if (!reference) return;
  check_prefix(*reference, "reference");
  const int64_t V = fwd.model().config().vocab_size;
  SINKQ_CHECK(reference->model().config().vocab_size == V,
              "KLD reference model has vocabulary {} but the model has {}", reference->model().config().vocab_size, V);
  SINKQ_CHECK(opt.ctx <= reference->max_ctx() - reference->prefix_size(),
              "perplexity context {} is longer than the reference forward's {}", opt.ctx,
              reference->max_ctx() - reference->prefix_size());
}

void PplTotals::add(double sum, int64_t n, const double* kl) {
  SINKQ_CHECK(std::isfinite(sum),
              "window {}: the NLL is not finite ({}): the model's logits contain NaN or Inf (weights that are NaN / Inf "
              "or overflow)",
              r_.windows + 1, sum);
  if (kl) {
    r_.has_kld = true;
    total_kld_ += *kl;
    r_.window_kld.push_back(*kl / double(n));
  }
  total_ += sum;
  r_.tokens_scored += n;
  r_.window_nll.push_back(sum / double(n));
  ++r_.windows;
  if (opt_.progress) opt_.progress(r_.windows, total_windows_, std::exp(total_ / double(r_.tokens_scored)));
}

PplResult PplTotals::result() const {
  PplResult r = r_;
  r.mean_nll = total_ / double(r.tokens_scored);
  if (r.has_kld) r.kld = total_kld_ / double(r.tokens_scored);
  r.ppl = std::exp(r.mean_nll);
  return r;
}

PplResult perplexity(Forward& fwd, const std::vector<int32_t>& toks, const PplOptions& opt,
                     Forward* reference) {
  check_ppl_forward(fwd, opt, reference);
  check_ppl_text(toks, opt);
  const auto windows = ppl_windows(toks, opt);
  const int64_t V = fwd.model().config().vocab_size;
  PplTotals totals(opt, int64_t(windows.size()));
  const size_t first = size_t(ppl_first_scored(opt));
  for (const auto& w : windows) {
    fwd.reset();
    const std::span<const float> logits = fwd.step(w, /*all_logits=*/true);
    double sum = 0;
    for (size_t p = first; p + 1 < w.size(); ++p) sum += token_nll(logits.data() + p * size_t(V), V, w[p + 1]);
    const int64_t n = int64_t(w.size()) - 1 - int64_t(first);
    if (!reference) {
      totals.add(sum, n);
      continue;
    }
    // fwd's logits live in fwd's own buffer: valid while the reference runs.
    reference->reset();
    const std::span<const float> ref = reference->step(w, /*all_logits=*/true);
    double kl = 0;
    for (size_t p = first; p + 1 < w.size(); ++p)
      kl += token_kld(ref.data() + p * size_t(V), logits.data() + p * size_t(V), V);
    totals.add(sum, n, &kl);
  }
  return totals.result();
}

int64_t ppl_tokens_needed(const PplOptions& opt) { return opt.max_windows > 0 ? opt.max_windows * opt.ctx : 0; }

std::vector<int32_t> scoring_tokens(const std::string& path, const Tokenizer& tok, int64_t need, uint64_t whole_bytes) {
  const MappedFile f = MappedFile::open(path);
  const std::string what = "'" + path + "'";
  const std::string_view all(reinterpret_cast<const char*>(f.data()), f.size());
  constexpr int64_t kMargin = 256;  // tokens past `need`: the end of a prefix may tokenize differently
  if (need > 0 && all.size() > whole_bytes) {
    for (uint64_t budget = uint64_t(need) * 16 + (uint64_t(1) << 20); budget < all.size(); budget *= 4) {
      const size_t cut = all.rfind('\n', budget);  // after a line end
      if (cut == std::string_view::npos) break;     // no lines: only the whole text is safe to cut
      const std::string_view prefix = all.substr(0, cut + 1);
      std::vector<int32_t> toks = scoring_tokens_of_text(prefix, tok, what);
      if (int64_t(toks.size()) >= need + kMargin) return toks;
    }
  }
  // The whole file: its tokens and the tokenizer's pieces take ~24 bytes per byte of text.
  const uint64_t est = uint64_t(all.size()) * 24, avail = mem_available_bytes();
  SINKQ_CHECK(avail == 0 || est < avail,
              "{} is {:.2f} GB of text: tokenizing all of it takes about {:.1f} GB (~24 bytes per byte), and {:.1f} GB "
              "are available: score its first windows only (--max-windows N reads just the text they need)",
              what, double(all.size()) / 1e9, double(est) / 1e9, double(avail) / 1e9);
  return scoring_tokens_of_text(all, tok, what);
}

std::vector<int32_t> scoring_tokens_of_text(std::string_view in, const Tokenizer& tok, std::string_view what) {
  require_utf8(in, what);
  const std::string text = lf_text(in);
  SINKQ_CHECK(!text.empty(), "{} is empty: no text to score", what);
  EncodeOptions raw;
  raw.add_special = false;
  raw.parse_special = false;
  return tok.encode(text, raw);
}

PplOptions ppl_options(const Tokenizer& tok, int64_t ctx, PplProtocol protocol, int64_t max_windows) {
  PplOptions po;
  po.ctx = ctx;
  po.protocol = protocol;
  po.max_windows = max_windows;
  po.bos_id = tok.bos_id();
  po.add_bos = tok.add_bos();
  return po;
}

PairedDiff paired_nll_diff(const PplResult& a, const PplResult& ref) {
  SINKQ_CHECK(a.window_nll.size() == ref.window_nll.size() && !a.window_nll.empty(),
              "paired NLL difference: {} windows against {} (the same windows are needed)", a.window_nll.size(),
              ref.window_nll.size());
  PairedDiff d;
  d.windows = int64_t(a.window_nll.size());
  for (size_t i = 0; i < a.window_nll.size(); ++i) d.mean += a.window_nll[i] - ref.window_nll[i];
  d.mean /= double(d.windows);
  if (d.windows < 2) return d;
  double ss = 0;
  for (size_t i = 0; i < a.window_nll.size(); ++i) {
    const double e = a.window_nll[i] - ref.window_nll[i] - d.mean;
    ss += e * e;
  }
  d.se = std::sqrt(ss / double(d.windows - 1) / double(d.windows));
  return d;
}

}  // namespace sinkq
