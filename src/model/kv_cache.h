// sinkq/model/kv_cache.h — full-precision KV cache of one sequence.
//
// Layout per layer: K and V each [capacity, kv_heads * head_dim] row-major, fp32; row r holds
// the token at absolute position r. New rows are written in place by the projections (no copy).
// A shared full-precision prefix (kv_prefix.h) sits in front of it (read in place, never copied);
// row r is then absolute position prefix size + r. A quantized body replaces this cache through
// Forward::set_kv_store (kv_store.h; runtime/packed_kv.h), which releases this cache's memory.
#pragma once

#include <cstdint>
#include <vector>

#include "core/error.h"

namespace sinkq {

class KVCache {
 public:
  KVCache() = default;
  // Layers [first_layer, first_layer + num_layers): a pipeline stage holds its own layers' rows only.
  KVCache(int num_layers, int64_t capacity, int64_t kv_dim, int first_layer = 0)
      : first_(first_layer), layers_(num_layers), capacity_(capacity), kv_dim_(kv_dim),
        k_(size_t(num_layers) * size_t(capacity) * size_t(kv_dim)),
        v_(size_t(num_layers) * size_t(capacity) * size_t(kv_dim)) {}

  int64_t size() const { return size_; }
  int64_t capacity() const { return capacity_; }
  int64_t kv_dim() const { return kv_dim_; }
  void clear() { size_ = 0; }
  // Drops the rows from `rows` on (a rewind: later rows are written over them).
  void truncate(int64_t rows) {
    SINKQ_ASSERT(rows >= 0 && rows <= size_);
    size_ = rows;
  }
  // Commit T rows written at [size, size + T).
  void advance(int64_t T) {
    SINKQ_ASSERT(size_ + T <= capacity_);
    size_ += T;
  }
  float* k(int layer) { return k_.data() + offset(layer); }
  float* v(int layer) { return v_.data() + offset(layer); }
  const float* k(int layer) const { return k_.data() + offset(layer); }
  const float* v(int layer) const { return v_.data() + offset(layer); }
  size_t bytes() const { return (k_.size() + v_.size()) * sizeof(float); }

 private:
  size_t offset(int layer) const {
    SINKQ_ASSERT(layer >= first_ && layer < first_ + layers_);
    return size_t(layer - first_) * size_t(capacity_ * kv_dim_);
  }
  int first_ = 0, layers_ = 0;
  int64_t capacity_ = 0, kv_dim_ = 0, size_ = 0;
  std::vector<float> k_, v_;
};

}  // namespace sinkq
