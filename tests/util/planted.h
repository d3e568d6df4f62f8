// tests/util/planted.h — a tiny model with planted outlier tokens (for analyze / prefix tests).
//
// The model is write_tiny_model's random model with a few weights edited so that chosen token ids
// produce a huge activation at down_in of chosen layers, through the model's real forward pass:
//
//   marker dim e   Every embedding row has 0 on hidden dim e except the outlier tokens' rows,
//                  which carry `marker` there (≫ their other entries, |x| <= init_scale). Column e
//                  of every q/k/v/gate/up projection is 0 (nothing reads e) and row e of every
//                  o_proj/down_proj is 0 (nothing writes e), so the residual stream keeps x_e =
//                  marker for outlier tokens and 0 for all others in every layer. After RMSNorm an
//                  outlier token's e entry is ≈ sqrt(hidden)·norm_weight_e (the marker dominates
//                  its RMS) and its other entries are small.
//   neuron r       In each planted layer, gate row r and up row r read only dim e, with weight
//                  `weight`: down_in[r] = silu(w·x̂_e)·(w·x̂_e) ≈ w²·hidden for outlier tokens
//                  (≈ 128 for the defaults) and exactly 0 for every other token. Column r of that
//                  layer's down_proj is 0, so the outlier does not feed back into the residual.
//   Normal tokens' down_in maxima stay O(0.1) (random weights, init_scale 0.08), so outlier tokens
//   sit at ratio ≥ 100 × the median of their sequence at the planted layers, while normal tokens
//   and every token at other layers stay well below PrefixQuant's η = 64 (analyze_test checks
//   both). Which tokens are outliers therefore depends only on the token id, not on its position.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "util/testutil.h"

namespace sinkq::testing {

struct PlantedOutlierSpec {
  TinyModelSpec base;              // shape, seed, dtype, architecture (any dtype)
  std::vector<int32_t> token_ids;  // the outlier tokens (each < base.vocab)
  std::vector<int> layers = {1};   // the layers whose down_in shows the outlier
  int dim = -1;                    // marker dim e in [0, hidden); -1 = hidden - 1
  int neuron = -1;                 // gate/up row r in [0, intermediate); -1 = intermediate - 1
  float marker = 8.0f;             // x_e of the outlier tokens' embedding rows
  float weight = 2.0f;             // gate/up weight on x̂_e in the planted layers
};

// The edit write_tiny_model applies (throws sinkq::Error for ids/layers/dims out of range).
TinyTensorEdit planted_outlier_edit(const PlantedOutlierSpec& spec);
// write_tiny_model(dir, spec.base, planted_outlier_edit(spec)); `dir` must exist.
void write_planted_model(const std::string& dir, const PlantedOutlierSpec& spec);

}  // namespace sinkq::testing
