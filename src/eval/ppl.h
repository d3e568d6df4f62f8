// sinkq/eval/ppl.h — perplexity over non-overlapping windows, under named protocols.
//
// Protocols (the text is tokenized once, whole, with no special tokens: `toks`):
//   gptq  The papers' protocol (GPTQ / PrefixQuant / CrossQuant code): stream = [BOS] + toks when
//         the tokenizer adds BOS, else toks; window k = stream[ctx·k, ctx·(k+1)); positions 0..ctx-2
//         predict 1..ctx-1 (ctx-1 predictions per window; the last incomplete window is dropped).
//   bos   Every window starts with BOS: window k = [BOS] + toks[(ctx-1)·k, (ctx-1)·(k+1));
//         BOS is never a target (ctx-1 predictions per window). The protocol of
//         ../shared/golden/*/ppl.json and of IntactKV's appendix F.
//   prefix PrefixQuant's evaluation: the Forward's KV prefix (model/kv_prefix.h: outlier tokens,
//         [BOS], a system prompt) sits in front of every window; stream = toks (no BOS: the
//         prefix carries it), window k = toks[ctx·k, ctx·(k+1)), ctx-1 predictions per window,
//         all inside the window. The prefix is never scored and the prediction of a window's
//         first token (from the prefix's last position, which is not recomputed) is not scored
//         either, so the scored tokens do not depend on which prefix is used: comparisons between
//         prefixes (none / [BOS] / outlier tokens; full-precision vs quantized prefix KV, i.e.
//         IntactKV on/off) score exactly the same targets. Needs a prefix on the Forward (and on
//         the reference); the other protocols refuse a Forward that has one.
//   llamacpp llama.cpp's llama-perplexity (tools/perplexity: chunks of n_ctx tokens of [BOS] + toks,
//         each chunk's first token replaced by BOS, only the second half scored): window k =
//         [BOS] + toks[ctx·k, ctx·k + ctx − 1) when the tokenizer adds BOS (add_bos), else plain
//         toks[ctx·k, ctx·(k+1)) as llama.cpp does then; positions ctx/2 .. ctx−2 predict the next
//         token (ctx − 1 − ctx/2 predictions per window: 255 at ctx 512). The same targets as
//         `llama-perplexity -c ctx` on the same file and tokenization, so the two engines' figures
//         compare directly (bench/vs_llamacpp.sh).
// NLL per prediction = logsumexp(logits) − logits[target], in double. ppl = exp(mean NLL over all
// scored predictions), natural log.
// KLD (optional, `reference` forward): KL(p_ref ‖ p) = Σ_v p_ref(v)·(log p_ref(v) − log p(v)) of the
// next-token distributions at every scored position, in double, averaged over the scored
// predictions. Both forwards run the same window in the same loop (no logits are stored).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "model/model.h"

namespace sinkq {

class Tokenizer;

enum class PplProtocol { Gptq, Bos, Prefix, LlamaCpp };
const char* ppl_protocol_name(PplProtocol p);
PplProtocol parse_ppl_protocol(const std::string& s);  // throws sinkq::Error naming the value

struct PplOptions {
  int64_t ctx = 0;              // window length in tokens (incl. BOS for the bos protocol)
  PplProtocol protocol = PplProtocol::Gptq;
  int64_t max_windows = 0;      // 0 = all complete windows
  int bos_id = -1;              // required by bos and llamacpp; used by gptq when add_bos
  bool add_bos = true;          // gptq: the tokenizer's own BOS once at the start of the text;
                                // llamacpp: BOS at the start of every chunk
  // Called after each window with (done, total, running ppl).
  std::function<void(int64_t, int64_t, double)> progress;
};

struct PplResult {
  double ppl = 0, mean_nll = 0;
  int64_t tokens_scored = 0;
  int64_t windows = 0;
  std::vector<double> window_nll;  // mean NLL of each window
  bool has_kld = false;            // a reference forward was given
  double kld = 0;                  // mean KL(p_ref || p) per scored prediction (nats)
  std::vector<double> window_kld;  // mean KL of each window
};

// The first position of a window whose prediction is scored (llamacpp: ctx/2; else 0).
int64_t ppl_first_scored(const PplOptions& opt);
// The windows a protocol cuts from `toks` (for tests and for listing what is scored).
std::vector<std::vector<int32_t>> ppl_windows(const std::vector<int32_t>& toks, const PplOptions& opt);
// Throws sinkq::Error when `toks` holds no complete window: perplexity() checks it, and a caller
// checks it before allocating a KV cache of opt.ctx positions.
void check_ppl_text(const std::vector<int32_t>& toks, const PplOptions& opt);

// The checks of perplexity() on the forwards before anything runs: ctx fits, the prefix matches the
// protocol, the reference has the same vocabulary (sinkq::Error naming --ctx / --protocol).
void check_ppl_forward(const Forward& fwd, const PplOptions& opt, const Forward* reference);

// The running totals of perplexity(), the windows' NLL sums added in window order (also by the
// MPI pipeline, dist/pipeline.h, whose last stage computes each window's sum the same way).
class PplTotals {
 public:
  PplTotals(const PplOptions& opt, int64_t windows) : opt_(opt), total_windows_(windows) {}
  // The next window's NLL sum over its n scored predictions (an error naming the window when it is
  // not finite) and, with a reference, its KL sum; calls opt.progress.
  void add(double nll_sum, int64_t n, const double* kl_sum = nullptr);
  PplResult result() const;

 private:
  const PplOptions& opt_;
  int64_t total_windows_;
  double total_ = 0, total_kld_ = 0;
  PplResult r_;
};

// Runs `fwd` (reset before every window) over the windows. Throws sinkq::Error if the text is
// too short for one window or ctx exceeds the forward's context. With `reference` (e.g. the
// full-precision model; same vocabulary required) also the KLD of fwd against it.
PplResult perplexity(Forward& fwd, const std::vector<int32_t>& toks, const PplOptions& opt,
                     Forward* reference = nullptr);

// The text of `path` as every scoring command reads it, tokenized raw (no BOS / EOS added, special
// tokens not parsed: the protocols place [BOS] themselves). Errors: an empty file, text that is not
// UTF-8 (naming the byte offset), and a file too large to tokenize whole in the memory available
// (~24 bytes per byte of text), before any of it is read.
// need > 0 (the tokens the windows asked for use, ppl_tokens_needed): a file over `whole_bytes`
// is read from its start only as far as those tokens need, with a margin (a prefix cut after a
// line end, grown 4x until it holds need + 256 tokens), so that the first windows of a 2 GB file
// score in bounded memory. Tokenization is local: the tokens of a prefix cut after a line end equal the
// whole text's up to the last few before the cut, which the margin keeps out of the windows
// (tested against the whole file). Smaller files are read whole, as before.
std::vector<int32_t> scoring_tokens(const std::string& path, const Tokenizer& tok, int64_t need = 0,
                                    uint64_t whole_bytes = uint64_t(64) << 20);
// The tokens the first opt.max_windows windows take at most (0: all of the text is needed).
int64_t ppl_tokens_needed(const PplOptions& opt);
// The same for text in memory (CRLF read as LF, as from a file); `what` names it in the error.
std::vector<int32_t> scoring_tokens_of_text(std::string_view text, const Tokenizer& tok, std::string_view what);
// The options of a protocol for this tokenizer (its BOS id and add_bos).
PplOptions ppl_options(const Tokenizer& tok, int64_t ctx, PplProtocol protocol, int64_t max_windows);

// −log softmax(logits)[target] in double precision.
double token_nll(const float* logits, int64_t vocab, int32_t target);
// log Σ exp(logits) in double (the normaliser token_nll subtracts from).
double logsumexp(const float* logits, int64_t vocab);

// One token's log-probability under `logits` and the top_n most likely tokens with theirs
// (descending; a tie: the lower id first): what a completion API's `logprobs` reports. logprob is
// exactly −token_nll(logits, vocab, id).
struct TokenLogprob {
  int32_t id = -1;
  double logprob = 0;
  std::vector<std::pair<int32_t, double>> top;
};
TokenLogprob token_logprob(const float* logits, int64_t vocab, int32_t id, int top_n);

// Appends `tokens` to fwd's sequence and scores tokens[i] for i in [from, size) given everything
// before it (token_logprob with top_n; 1 <= from <= size), appending to `out`. The logits are
// computed in chunks of at most `chunk` tokens, so memory stays [chunk, vocab] for any length.
// Returns the logits after the last token [vocab] (valid until fwd's next step).
std::span<const float> feed_scored(Forward& fwd, std::span<const int32_t> tokens, int64_t from, int top_n,
                                   std::vector<TokenLogprob>& out, int64_t chunk = 256);

// KL(softmax(p_logits) ‖ softmax(q_logits)) in double, nats. Exactly 0 when the logits are equal;
// rounding can make the sum of a near-zero KL a few ulps negative, so the result is max(0, ·)
// (the true value is >= 0 by Gibbs' inequality).
double token_kld(const float* p_logits, const float* q_logits, int64_t vocab);

// The mean per-window NLL difference of `a` to `ref`, scored on the same windows, and its
// standard error (paired: the windows' differences, sample s.d. / sqrt(n); 0 with one window).
// Pairing removes the windows' own difficulty, which dominates the unpaired spread.
struct PairedDiff {
  double mean = 0, se = 0;
  int64_t windows = 0;
};
PairedDiff paired_nll_diff(const PplResult& a, const PplResult& ref);

}  // namespace sinkq
