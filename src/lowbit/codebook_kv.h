// sinkq/lowbit/codebook_kv.h — KVQuant's packed KV body: per layer and K / V, b-bit codebook
// indices (formats/nuq.h), each token's range when its vectors are tokens, and the dense-and-sparse
// outliers as fp16 values in an append-only CSR by token.
//
// Layout per (layer, K|V):
//   codes     [capacity, ceil(kv_dim·bits/8)] bytes: the row's kv_dim indices as a little-endian
//             bit stream (index c at bits [c·b, (c+1)·b)); an outlier's index is 0 (unused).
//   ranges    token vectors: [capacity] × (lo, hi) fp32 — the normalisation of the row, so a
//             decoded value is nuq::decode's exact bits (fp16 here would move values the
//             simulator codes on its fp32 range); channel vectors: the codec's calibrated lo / hi.
//   outliers  CSR by token: row_ptr [capacity + 1] uint32, then (channel uint16, value fp16) per
//             outlier in row order. Decision: by token (CSR), not by channel (CSC), for Keys too:
//             appending a token appends its entries at the end and one row pointer, and nothing
//             written before moves (a CSC of per-channel Keys would insert into every column).
//             Rows are written in order (row0 = the rows held so far, or fewer after a reset /
//             rewind: entries past row0 are dropped first).
// Values decode to nuq::Codec::apply's bits: the packed store equals the simulator's fake quant
// element for element. bytes() counts what is held: codes and ranges for the capacity, outliers as
// stored (their count depends on the data for channel vectors).
#pragma once

#include <cstdint>
#include <vector>

#include "formats/nuq.h"

namespace sinkq::lowbit {

class CodebookKvCache {
 public:
  // codecs_k / codecs_v: one per layer (bits = log2 of their level count, 2..4; channel codecs with
  // kv_dim ranges). Throws sinkq::Error when they do not fit.
  CodebookKvCache(int num_layers, int64_t kv_dim, int64_t capacity, std::vector<formats::nuq::Codec> codecs_k,
                  std::vector<formats::nuq::Codec> codecs_v);

  int num_layers() const { return layers_; }
  int64_t kv_dim() const { return kv_dim_; }
  int64_t capacity() const { return capacity_; }
  int bits() const { return bits_; }
  size_t bytes() const;
  // Outliers held in rows [0, rows) of a layer's K (value = false) or V.
  int64_t outliers(int layer, bool value) const;

  // Codes k, v [T, kv_dim] fp32 into rows [row0, row0 + T) of `layer` (row0 ≤ rows written).
  void store(int layer, int64_t row0, const float* k, const float* v, int64_t T);
  // x̂ of rows [0, n) of the layer's K (value = false) or V, [n, kv_dim] fp32.
  void dequantize(int layer, bool value, int64_t n, float* out) const;

 private:
  struct Part {
    formats::nuq::Codec codec;
    std::vector<uint8_t> codes;
    std::vector<float> range;  // token vectors: [capacity][lo, hi]
    std::vector<uint32_t> row_ptr;
    std::vector<uint16_t> col, val;
    int64_t rows = 0;  // rows written
  };
  void store_part(Part& p, int64_t row0, const float* x, int64_t T);
  void dequantize_part(const Part& p, int64_t n, float* out) const;
  int layers_ = 0, bits_ = 0;
  int64_t kv_dim_ = 0, capacity_ = 0, row_bytes_ = 0;
  std::vector<Part> parts_;  // [layer][K, V]
};

}  // namespace sinkq::lowbit
