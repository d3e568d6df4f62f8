// sinkq/eval/analyze.h — where a model's outliers are: token-wise max statistics, outlier tokens,
// attention mass on the first tokens, and the quantization kernel, from calibration samples.
//
// Every statistic is observed through read-only site hooks (model/sites.h) while the samples run
// through the model, one sequence per Forward call (the Forward is reset before each sample):
//
// 1. Token-wise maxima (PrefixQuant §3, Fig. 2/3). For an activation X[T, C] at (site, layer) the
//    token-wise maximum of token t is M_t = max_c |X_tc|. Over all tokens of all samples:
//    top-1 = max M, median = median M, min-1 = min M, and the ratios top-1/median (upper outlier
//    tokens) and median/min-1 (lower outlier tokens). Every site except logits.
// 2. Outlier tokens (PrefixQuant §5.1, eq. 3) at down_in (the input of down_proj) and the residual
//    stream (out) of each layer (calib/outliers.h kOutlierSites): token t of a sample is an outlier
//    when M_t / median(M of that sample at that layer and site) > η at either site.
//    Counted per layer (PrefixQuant's O: mean count per sequence) and per token id.
// 3. Attention mass on the first tokens, per layer and query head: the softmax probabilities of
//    the model's own attention, recomputed from the q and k sites (after RoPE) with the causal
//    mask, scale 1/sqrt(head_dim), GQA (query head h reads kv head h / (heads / kv_heads)) and
//    the sliding window when the model has one. to_first = mean over queries at positions >= 1 of
//    p(key 0); to_first4 = mean over queries at positions >= 4 of p(keys 0..3) (queries 0..3 are
//    left out because for them the mass is 1 by construction).
// 4. Quantization kernel (CrossQuant Def. 1): the share of nonzero elements quantized to 0 at the
//    four linear-layer inputs (attn_in, o_in, mlp_in, down_in), for dynamic per-token symmetric
//    quantization (quant::compute_params, per_row) and for CrossQuant with each α
//    (quant::CrossQuantizer, column maxima per Forward call — the paper's whole-sequence
//    evaluation), both at `bits`. α = 1 is per-token quantization bit for bit.
//
// Medians are the lower median (element ⌊(n-1)/2⌋ of the sorted values), as torch.median, which
// the PrefixQuant reference code uses.
//
// Building a prefix finder (PrefixQuant §5.1) on this:
//   OutlierStats s = find_outlier_tokens(fwd, samples, /*eta=*/64);   // or analyze(...).outliers
//   int o = s.outlier_number();           // ⌈max over layers of the mean count per sequence⌉
//   std::vector<int32_t> ids = s.frequent_tokens(n);  // the n most frequent outlier tokens, counted
//                                         // at non-initial positions only (the paper's footnote)
// How many tokens to take for a given o, and where [BOS] goes, is the prefix finder's decision;
// s.tokens (every hit with its layer, sample, position and ratio) and s.counts hold the rest.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <span>
#include <string>
#include <vector>

#include "calib/outliers.h"
#include "formats/quantizer.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace sinkq {

// The sites analysed for token-wise maxima: every site but logits, in Site order.
inline constexpr std::array<Site, 9> kAnalyzedSites = {Site::AttnIn, Site::Q,     Site::KPreRope,
                                                       Site::K,      Site::V,     Site::OIn,
                                                       Site::MlpIn,  Site::DownIn, Site::Out};

// ---- the whole analysis ---------------------------------------------------------------------

struct AnalyzeOptions {
  double eta = 64.0;                                     // outlier threshold, > 0
  std::vector<Site> outlier_sites{kOutlierSites.begin(), kOutlierSites.end()};  // calib/outliers.h
  int bits = 4;                                          // kernel statistics, 2..8
  std::vector<float> alphas = {0.15f, 0.45f, 0.75f, 1.0f};  // CrossQuant α values, each in [0, 1]
  const Tokenizer* tokenizer = nullptr;                  // token texts (optional)
  // A full-precision KV prefix in front of every sample (PrefixQuant / IntactKV; kv_prefix.h), or
  // none. Statistics then cover the body only (the prefix is not recomputed, so no site sees it);
  // attention probabilities include the prefix keys, and "first tokens" are absolute positions,
  // i.e. the prefix: how much attention the prefix absorbs.
  std::shared_ptr<const KvPrefix> prefix;
  std::function<void(int64_t, int64_t)> progress;        // (samples done, total)
};
void validate(const AnalyzeOptions& o);  // throws sinkq::Error naming "eta" / "bits" / "alpha"

struct AttentionStats {
  std::vector<double> to_first;   // [heads] mean p(key 0) over queries at positions >= 1
  std::vector<double> to_first4;  // [heads] mean p(keys 0..3) over queries at positions >= 4
  int64_t queries = 0;            // per head, for to_first (sample × position pairs)
  int64_t queries4 = 0;           // per head, for to_first4
  double mean_to_first() const;   // over heads
  double max_to_first() const;
};

struct KernelStats {
  quant::KernelCount per_token;
  std::vector<quant::KernelCount> crossquant;  // [alphas]
};

struct LayerReport {
  std::array<TokenMaxStats, kAnalyzedSites.size()> sites;  // kAnalyzedSites order
  AttentionStats attention;
  std::array<KernelStats, kLinearInputSites.size()> kernel;  // kLinearInputSites order
  const TokenMaxStats& site(Site s) const;  // s must be in kAnalyzedSites
};

struct AnalyzeReport {
  double eta = 64.0;
  int bits = 4;
  std::vector<float> alphas;
  int64_t samples = 0, len = 0;  // len: the longest sample
  std::vector<int32_t> prefix;   // the KV prefix's tokens (empty: none)
  int layers = 0, heads = 0, kv_heads = 0, head_dim = 0, sliding_window = 0;
  std::vector<LayerReport> layer;  // [layers]
  OutlierStats outliers;
};

// Runs every sample (reset before each; one Forward call per sample, so CrossQuant's per-call
// column maxima are the whole sequence's) and collects the report. Samples must be non-empty and
// no longer than the model's max_position_embeddings.
AnalyzeReport analyze(std::shared_ptr<const Model> model, const std::vector<std::vector<int32_t>>& samples,
                      const AnalyzeOptions& opt);

// The whole report as JSON (non-finite numbers as null).
nlohmann::json to_json(const AnalyzeReport& r);
// A readable text summary (several tables; ends with a newline).
std::string to_text(const AnalyzeReport& r);
// Plots: file name -> SVG document. token_max_<site>.svg (per layer top-1/median/min-1 bars on a
// log scale, one per site), attention_token0.svg (layer × head heatmap), kernel_<site>.svg (per
// layer: per-token vs each α).
std::vector<std::pair<std::string, std::string>> report_svgs(const AnalyzeReport& r);

// Writes report.json (= `report`) and report_svgs(r) into a new directory `dir`, atomically: all
// files go into a temporary directory beside it that is then renamed onto `dir`. `dir` must not
// exist or be an empty directory (sinkq::Error otherwise, naming it); on any failure nothing is
// left behind.
void write_report_dir(const AnalyzeReport& r, const nlohmann::json& report, const std::string& dir);
// The check write_report_dir starts with, for failing before any work is done.
void check_output_dir(const std::string& dir);
// The same for any set of (file name, contents): every output directory of sinkq (analyze, eval).
void write_output_dir(const std::string& dir, const std::vector<std::pair<std::string, std::string>>& files);

}  // namespace sinkq
