// sinkq/lowbit/codebook_kv.cc — KVQuant's packed KV body (codebook_kv.h), scalar.
#include "lowbit/codebook_kv.h"

#include <bit>
#include <cmath>
#include <cstring>

#include "core/dtype.h"
#include "core/error.h"

namespace sinkq::lowbit {

namespace nuq = formats::nuq;

namespace {

void put_bits(uint8_t* row, int64_t index, int bits, uint32_t code) {
  const int64_t bit = index * bits;
  for (int i = 0; i < bits; ++i) {
    const int64_t b = bit + i;
    if (code >> i & 1u) row[b >> 3] |= uint8_t(1u << (b & 7));
  }
}

uint32_t get_bits(const uint8_t* row, int64_t index, int bits) {
  const int64_t bit = index * bits;
  uint32_t v = 0;
  for (int i = 0; i < bits; ++i) {
    const int64_t b = bit + i;
    v |= uint32_t(row[b >> 3] >> (b & 7) & 1u) << i;
  }
  return v;
}

}  // namespace

CodebookKvCache::CodebookKvCache(int num_layers, int64_t kv_dim, int64_t capacity, std::vector<nuq::Codec> ck,
                                 std::vector<nuq::Codec> cv)
    : layers_(num_layers), kv_dim_(kv_dim), capacity_(capacity) {
  SINKQ_CHECK(num_layers >= 1 && kv_dim >= 1 && capacity >= 1, "codebook KV: {} layers, kv_dim {}, capacity {}",
              num_layers, kv_dim, capacity);
  SINKQ_CHECK(int(ck.size()) == num_layers && int(cv.size()) == num_layers,
              "codebook KV: codecs for {} / {} layers (K / V), the model has {}", ck.size(), cv.size(), num_layers);
  SINKQ_CHECK(kv_dim <= 65536, "codebook KV: kv_dim {} does not fit the outliers' uint16 channel index", kv_dim);
  const size_t n_levels = ck[0].levels.size();
  bits_ = std::countr_zero(n_levels);
  SINKQ_CHECK(n_levels >= 4 && n_levels <= 16 && std::has_single_bit(n_levels),
              "codebook KV: {} levels; packed codebooks are 2, 3 or 4 bits (4, 8 or 16 levels)", n_levels);
  row_bytes_ = (kv_dim * bits_ + 7) / 8;
  for (int l = 0; l < num_layers; ++l) {
    for (nuq::Codec* c : {&ck[size_t(l)], &cv[size_t(l)]}) {
      SINKQ_CHECK(c->levels.size() == n_levels, "codebook KV: layer {} has {} levels, layer 0 {}", l, c->levels.size(),
                  n_levels);
      SINKQ_CHECK(!c->per_channel || (int64_t(c->lo.size()) == kv_dim && int64_t(c->hi.size()) == kv_dim),
                  "codebook KV: layer {}'s channel ranges are for {} channels, kv_dim is {}", l, c->lo.size(), kv_dim);
      Part p;
      p.codec = std::move(*c);
      p.codes.assign(size_t(capacity * row_bytes_), 0);
      if (!p.codec.per_channel) p.range.assign(size_t(2 * capacity), 0.0f);
      p.row_ptr.assign(size_t(capacity) + 1, 0);
      parts_.push_back(std::move(p));
    }
  }
}

size_t CodebookKvCache::bytes() const {
  size_t b = 0;
  for (const Part& p : parts_)
    b += p.codes.size() + p.range.size() * sizeof(float) + p.row_ptr.size() * sizeof(uint32_t) +
         (p.col.size() + p.val.size()) * sizeof(uint16_t) + (p.codec.lo.size() + p.codec.hi.size()) * sizeof(float);
  return b;
}

int64_t CodebookKvCache::outliers(int layer, bool value) const {
  SINKQ_ASSERT(layer >= 0 && layer < layers_);
  return int64_t(parts_[size_t(layer) * 2 + value].col.size());
}

void CodebookKvCache::store(int layer, int64_t row0, const float* k, const float* v, int64_t T) {
  SINKQ_CHECK(layer >= 0 && layer < layers_, "codebook KV: layer {} of {}", layer, layers_);
  store_part(parts_[size_t(layer) * 2], row0, k, T);
  store_part(parts_[size_t(layer) * 2 + 1], row0, v, T);
}

void CodebookKvCache::store_part(Part& p, int64_t row0, const float* x, int64_t T) {
  SINKQ_CHECK(row0 >= 0 && row0 <= p.rows && row0 + T <= capacity_,
              "codebook KV: rows [{}, {}) with {} written and capacity {} (rows are appended in order)", row0, row0 + T,
              p.rows, capacity_);
  // Drop what lies past row0 (a rewind), then append.
  p.col.resize(p.row_ptr[size_t(row0)]);
  p.val.resize(p.row_ptr[size_t(row0)]);
  const bool sparse = p.codec.sparse();
  for (int64_t t = 0; t < T; ++t) {
    const float* row = x + t * kv_dim_;
    for (int64_t c = 0; c < kv_dim_; ++c)
      SINKQ_CHECK(std::isfinite(row[c]), "codebook KV: non-finite value at row {} channel {}", row0 + t, c);
    const int64_t r = row0 + t;
    uint8_t* codes = p.codes.data() + r * row_bytes_;
    std::memset(codes, 0, size_t(row_bytes_));
    nuq::Range tr;
    if (!p.codec.per_channel) {
      tr = p.codec.row_range(row, kv_dim_);
      p.range[size_t(2 * r)] = tr.lo;
      p.range[size_t(2 * r + 1)] = tr.hi;
    }
    for (int64_t c = 0; c < kv_dim_; ++c) {
      const nuq::Range range = p.codec.per_channel ? p.codec.channel_range(c) : tr;
      if (nuq::is_outlier(row[c], range, sparse)) {
        p.col.push_back(uint16_t(c));
        p.val.push_back(f32_to_f16(nuq::fp16_round(row[c])));
        continue;
      }
      put_bits(codes, c, bits_, uint32_t(nuq::encode(row[c], range, p.codec.levels)));
    }
    SINKQ_CHECK(p.col.size() <= UINT32_MAX, "codebook KV: more than 2^32 outliers in one layer");
    p.row_ptr[size_t(r) + 1] = uint32_t(p.col.size());
  }
  p.rows = row0 + T;
}

void CodebookKvCache::dequantize(int layer, bool value, int64_t n, float* out) const {
  SINKQ_CHECK(layer >= 0 && layer < layers_, "codebook KV: layer {} of {}", layer, layers_);
  dequantize_part(parts_[size_t(layer) * 2 + value], n, out);
}

void CodebookKvCache::dequantize_part(const Part& p, int64_t n, float* out) const {
  SINKQ_CHECK(n >= 0 && n <= p.rows, "codebook KV: {} rows asked, {} written", n, p.rows);
  const std::vector<float>& lv = p.codec.levels;
  for (int64_t r = 0; r < n; ++r) {
    const uint8_t* codes = p.codes.data() + r * row_bytes_;
    float* o = out + r * kv_dim_;
    if (p.codec.per_channel) {
      for (int64_t c = 0; c < kv_dim_; ++c) o[c] = nuq::decode(int(get_bits(codes, c, bits_)), p.codec.channel_range(c), lv);
    } else {
      const nuq::Range tr{p.range[size_t(2 * r)], p.range[size_t(2 * r + 1)]};
      for (int64_t c = 0; c < kv_dim_; ++c) o[c] = nuq::decode(int(get_bits(codes, c, bits_)), tr, lv);
    }
    for (uint32_t i = p.row_ptr[size_t(r)]; i < p.row_ptr[size_t(r) + 1]; ++i) o[p.col[i]] = f16_to_f32(p.val[i]);
  }
}

}  // namespace sinkq::lowbit
