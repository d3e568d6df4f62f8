// sinkq/calib/outliers.h — token-wise maxima and outlier tokens (PrefixQuant §3, §5.1 eq. 3),
// the statistics the prefix finder (calib/prefix.h) and `sinkq analyze` (eval/analyze.h) both read.
// Definitions, medians and the finder recipe: eval/analyze.h's header comment, items 1–2.
#pragma once

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

struct OutlierToken {
  int layer = 0;
  int64_t sample = 0;    // index of the sequence (order of the calls / samples)
  int64_t position = 0;  // absolute position in the sequence
  int32_t token_id = 0;
  float token_max = 0;   // M_t at down_in of `layer`
  float median = 0;      // median of that sequence's M at down_in of `layer`
  double ratio = 0;      // token_max / median
  std::string text;      // the token's text when a tokenizer was given, else ""
};

struct OutlierTokenCount {
  int32_t token_id = 0;
  int64_t occurrences = 0;  // outlier hits over all (layer, sample, position)
  int64_t non_initial = 0;  // of those, hits at positions != 0: what PrefixQuant's reference code
                            // counts to choose the prefix tokens
  int64_t positions = 0;    // distinct (sample, position) that are outliers in at least one layer
  std::string text;
};

struct OutlierStats {
  double eta = 64.0;
  int64_t sequences = 0;
  std::vector<OutlierToken> tokens;       // every hit, ordered by (layer, sample, position)
  std::vector<int64_t> count;             // [layer] hits
  std::vector<double> mean_count;         // [layer] hits per sequence (PrefixQuant's O)
  std::vector<OutlierTokenCount> counts;  // per token id, by non_initial, occurrences (descending),
                                          // then token id (ascending)

  // o = ⌈max over layers of mean_count⌉, in exact integer arithmetic; 0 when nothing was seen.
  int outlier_number() const;
  // The (at most) `o` token ids with the most non-initial hits (ties: more occurrences, then the
  // smaller id); ids with no non-initial hit are never returned.
  std::vector<int32_t> frequent_tokens(int o) const;
};

// Collects OutlierStats from the down_in site of every layer of `fwd` while it runs (hooks are
// added in the constructor and removed in the destructor; `fwd` must outlive the finder). A
// sequence may arrive in several step() calls (chunks); call end_sequence() after each one.
class OutlierFinder {
 public:
  OutlierFinder(Forward& fwd, double eta, const Tokenizer* tok = nullptr);
  ~OutlierFinder();
  OutlierFinder(const OutlierFinder&) = delete;
  OutlierFinder& operator=(const OutlierFinder&) = delete;

  void end_sequence();
  const OutlierStats& stats() const { return stats_; }  // complete after the last end_sequence()
  // A pipeline stage's share (dist/): layer l's rows of the current sequence as JSON
  // [[position, id, max], ...], and another stage's rows put in before end_sequence().
  nlohmann::json rows_json(int layer) const;
  void set_rows(int layer, const nlohmann::json& rows);

 private:
  Forward& fwd_;
  const Tokenizer* tok_;
  int handle_ = 0;
  OutlierStats stats_;
  // Current sequence, per layer: (position, token id, M) of each token seen so far.
  struct Row {
    int64_t position;
    int32_t token_id;
    float max;
  };
  std::vector<std::vector<Row>> rows_;
};

// Runs every sample through `fwd` (reset before each, one step() per sample) and returns the
// outlier tokens. Samples must fit fwd.max_ctx(). progress(done, total) after each sample.
OutlierStats find_outlier_tokens(Forward& fwd, const std::vector<std::vector<int32_t>>& samples, double eta,
                                 const Tokenizer* tok = nullptr,
                                 const std::function<void(int64_t, int64_t)>& progress = {});

}  // namespace sinkq
