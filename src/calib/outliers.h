// sinkq/calib/outliers.h — token-wise maxima and outlier tokens (PrefixQuant §3, §5.1 eq. 3),
// the statistics the prefix finder (calib/prefix.h) and `sinkq analyze` (eval/analyze.h) both read.
// Definitions, medians and the finder recipe: eval/analyze.h's header comment, items 1–2.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace sinkq {

// Token-wise maximum |x| of every row of x[rows, cols]: out[rows].
void token_max(const float* x, int64_t rows, int64_t cols, float* out);
// Lower median (see above); 0 for an empty span. Does not modify `v`.
float lower_median(std::span<const float> v);

// Top-1 / median / min-1 of a set of token-wise maxima.
struct TokenMaxStats {
  int64_t tokens = 0;
  float top1 = 0, median = 0, min1 = 0;
  // +inf when the denominator is 0 (to_json writes null); NaN when there are no tokens.
  double top1_over_median() const;
  double median_over_min1() const;
};
TokenMaxStats token_max_stats(std::span<const float> maxima);

// ---- outlier tokens -------------------------------------------------------------------------

// PrefixQuant eq. 3 on one sequence's token maxima M: the indices t (ascending) with
// M_t / median(M) > eta (M_t > 0 = median counts as an outlier: the ratio is +inf).
std::vector<int64_t> outlier_indices(std::span<const float> token_max, double eta);

// Where outlier tokens are measured (kOutlierSites): PrefixQuant §5.1's down_proj input, and the
// residual stream (the block output `out`), where massive activations live (Sun et al. 2024). A
// token is an outlier in a layer when its ratio exceeds eta at either. Why both: PrefixQuant picks
// down_in because there the outliers are "more highlighted" (Llama-2-7B: 4127x), and takes the
// outlier tokens to be the same tokens at every site; in Qwen2.5-Coder-1.5B the sink ([BOS]) sits
// at 100-261x the median token in the residual stream of layers 2-22, but RMSNorm's gains flatten
// it at every linear input (down_in at most 22x, layer 1), so down_in alone finds no outlier token
// (docs/results-qwen2.5-1.5b.md, "The finder"). On SmolLM2 the residual stream adds hits of the
// initial token only, so its prefix is unchanged (tests/calib/calib_test.cc).
// The finder takes its sites as data: {Site::DownIn} alone is the paper's (and the authors' code's)
// definition, which tests and parity runs can ask for.
inline constexpr std::array<Site, 2> kOutlierSites = {Site::DownIn, Site::Out};

struct OutlierToken {
  int layer = 0;
  int64_t sample = 0;    // index of the sequence (order of the calls / samples)
  int64_t position = 0;  // absolute position in the sequence
  int32_t token_id = 0;
  Site site = Site::DownIn;  // the measured site where its ratio is the largest
  bool at_first_site = false;  // an outlier at the first measured site (down_in) too
  float token_max = 0;   // M_t at `site` of `layer`
  float median = 0;      // median of that sequence's M at `site` of `layer`
  double ratio = 0;      // token_max / median
  std::string text;      // the token's text when a tokenizer was given, else ""
};

struct OutlierTokenCount {
  int32_t token_id = 0;
  int64_t occurrences = 0;  // outlier hits over all (layer, sample, position), at any site
  int64_t non_initial = 0;  // of those, hits at positions != 0: what PrefixQuant's reference code
                            // counts to choose the prefix tokens
  int64_t positions = 0;    // distinct (sample, position) that are outliers in at least one layer
  // The same two counts at the first site alone (down_in: the paper's). The tokens that site sees
  // rank first, by these counts alone (then the smaller id), as the paper ranks them; tokens seen
  // only in the residual stream come after, by the counts over every site. Why not one ranking over
  // both: a massive activation persists in the residual stream for the layers after the one that
  // made it, so residual hits count a token once per later layer where down_in counts where it
  // forms — not comparable. This keeps the paper's choice wherever its site sees the tokens
  // (SmolLM2's 4 x 128 demo calibration: " the" and " Tim" 1 down_in hit each, " Tim" 10 more in
  // the residual stream; " the" stays) and lets the residual stream speak where it alone sees them.
  int64_t first_site_occurrences = 0;
  int64_t first_site_non_initial = 0;
  std::string text;
};

struct OutlierStats {
  double eta = 64.0;
  std::vector<Site> sites;                // where tokens were measured (kOutlierSites by default)
  int64_t sequences = 0;
  std::vector<OutlierToken> tokens;       // every hit, ordered by (layer, sample, position)
  std::vector<int64_t> count;             // [layer] hits
  std::vector<double> mean_count;         // [layer] hits per sequence (PrefixQuant's O)
  std::vector<OutlierTokenCount> counts;  // per token id: those with first-site hits by
                                          // first_site_non_initial, first_site_occurrences
                                          // (descending), id (ascending); then the others by
                                          // non_initial, occurrences (descending), id

  // o = ⌈max over layers of mean_count⌉, in exact integer arithmetic; 0 when nothing was seen.
  int outlier_number() const;
  // The (at most) `o` first token ids in `counts`' order (the most non-initial hits at the first
  // site, then ...; see OutlierTokenCount); ids with no non-initial hit are never returned.
  std::vector<int32_t> frequent_tokens(int o) const;
};

// Collects OutlierStats from `sites` (down_in / out) of every layer of `fwd` while it runs (hooks are
// added in the constructor and removed in the destructor; `fwd` must outlive the finder). A
// sequence may arrive in several step() calls (chunks); call end_sequence() after each one.
class OutlierFinder {
 public:
  OutlierFinder(Forward& fwd, double eta, const Tokenizer* tok = nullptr,
                std::span<const Site> sites = kOutlierSites);
  ~OutlierFinder();
  OutlierFinder(const OutlierFinder&) = delete;
  OutlierFinder& operator=(const OutlierFinder&) = delete;

  void end_sequence();
  const OutlierStats& stats() const { return stats_; }  // complete after the last end_sequence()
  // A pipeline stage's share (dist/): layer l's rows of the current sequence as JSON
  // [[position, id, max per site...], ...], and another stage's rows put in before end_sequence().
  nlohmann::json rows_json(int layer) const;
  void set_rows(int layer, const nlohmann::json& rows);

 private:
  Forward& fwd_;
  const Tokenizer* tok_;
  std::vector<int> handles_;
  OutlierStats stats_;
  // Current sequence, per layer: (position, token id) of each token seen so far, and its M at
  // each site (max_[layer][site index]).
  struct Row {
    int64_t position;
    int32_t token_id;
  };
  std::vector<std::vector<Row>> rows_;
  std::vector<std::vector<std::vector<float>>> max_;
};

// Runs every sample through `fwd` (reset before each, one step() per sample) and returns the
// outlier tokens. Samples must fit fwd.max_ctx(). progress(done, total) after each sample.
OutlierStats find_outlier_tokens(Forward& fwd, const std::vector<std::vector<int32_t>>& samples, double eta,
                                 const Tokenizer* tok = nullptr,
                                 const std::function<void(int64_t, int64_t)>& progress = {},
                                 std::span<const Site> sites = kOutlierSites);

}  // namespace sinkq
