// sinkq/model/kv_prefix.h — a full-precision KV prefix shared by many sequences (PrefixQuant's
// prefixed outlier tokens, IntactKV's pivot tokens).
//
// A short token sequence is run once through the full-precision model; the keys and values of
// every layer are kept (fp32) and placed in front of every sequence a Forward runs: the body's
// positions continue after the prefix, attention sees [prefix; body], the prefix is never
// quantized (site hooks never see its rows: it is not recomputed) and never scored. Forwards share
// one KvPrefix through a shared_ptr: the rows are never copied into a sequence's cache
// (attention reads them in place, kernels/ops.h KvSegment).
//
// Which model computes it: the full-precision model the body runs on, before quantization. For a
// rotated model that is the rotated fp model WITH its online rotations (R3 rotates keys before
// they are cached), so the prefix rows live in the same basis as the body's rows — `prepare`
// registers those hooks on the Forward that computes the prefix. Quantization hooks must not be
// registered there: the prefix is full precision by definition. (One deliberate exception: the
// "IntactKV off" baseline, quant/sim.h PrefixSim source Quant, computes it with the quantized
// model and its hooks, to measure what the fp prefix buys.) A stored prefix (an artifact) comes
// back through from_rows.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "kernels/ops.h"

namespace sinkq {

class Model;
class Forward;

class KvPrefix {
 public:
  // Runs `tokens` (at positions 0..P-1) through `model` and keeps every layer's K and V rows.
  // `prepare` may register computationally invariant hooks (online rotations) on the Forward
  // first. Throws sinkq::Error for an empty prefix or one longer than max_position_embeddings.
  static std::shared_ptr<const KvPrefix> compute(std::shared_ptr<const Model> model, std::vector<int32_t> tokens,
                                                 const std::function<void(Forward&)>& prepare = {});

  // A prefix from stored rows (a sinkq artifact): k and v are [num_layers][P][kv_dim] each, P =
  // tokens.size(). Throws sinkq::Error when the sizes disagree or the prefix is empty.
  static std::shared_ptr<const KvPrefix> from_rows(std::vector<int32_t> tokens, int num_layers, int64_t kv_dim,
                                                   std::vector<float> k, std::vector<float> v);

  int64_t size() const { return int64_t(tokens_.size()); }  // P
  const std::vector<int32_t>& tokens() const { return tokens_; }
  int num_layers() const { return num_layers_; }
  int64_t kv_dim() const { return kv_dim_; }
  // Layer l's rows: K and V [P, kv_dim] each.
  KvSegment segment(int layer) const;
  size_t bytes() const { return (k_.size() + v_.size()) * sizeof(float); }

 private:
  std::vector<int32_t> tokens_;
  int num_layers_ = 0;
  int64_t kv_dim_ = 0;
  std::vector<float> k_, v_;  // [layer][P][kv_dim]
};

}  // namespace sinkq
