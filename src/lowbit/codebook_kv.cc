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

// ORs code (< 2^bits, bits <= 8) into a zeroed bit stream at index·bits.
void put_bits(uint8_t* row, int64_t index, int bits, uint32_t code) {
  const int64_t bit = index * bits;
  const int sh = int(bit & 7);
  row[bit >> 3] |= uint8_t(code << sh);
  if (sh + bits > 8) row[(bit >> 3) + 1] |= uint8_t(code >> (8 - sh));
}


}  // namespace

CodebookKvCache::CodebookKvCache(int num_layers, int64_t kv_dim, int64_t capacity, std::vector<nuq::Codec> ck,
                                 std::vector<nuq::Codec> cv, int held_begin, int held_end)
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
    const int64_t rows = l >= held_begin && (held_end < 0 || l < held_end) ? capacity : 0;
    for (nuq::Codec* c : {&ck[size_t(l)], &cv[size_t(l)]}) {
      SINKQ_CHECK(c->levels.size() == n_levels, "codebook KV: layer {} has {} levels, layer 0 {}", l, c->levels.size(),
                  n_levels);
      SINKQ_CHECK(!c->per_channel || (int64_t(c->lo.size()) == kv_dim && int64_t(c->hi.size()) == kv_dim),
                  "codebook KV: layer {}'s channel ranges are for {} channels, kv_dim is {}", l, c->lo.size(), kv_dim);
      Part p;
      p.codec = std::move(*c);
      p.codes.assign(size_t(rows * row_bytes_ + detail::kCodeSlack), 0);
      if (!p.codec.per_channel) {
        p.sz.assign(size_t(2 * rows), 0.0f);
      } else {
        p.ch_scale.assign(size_t(kv_dim + 16), 0.0f);
        p.ch_zero.assign(size_t(kv_dim + 16), 0.0f);
        for (int64_t ch = 0; ch < kv_dim; ++ch) {
          const nuq::Range r = p.codec.channel_range(ch);
          p.ch_scale[size_t(ch)] = r.scale();
          p.ch_zero[size_t(ch)] = r.zero();
        }
      }
      p.levels.assign(16, 0.0f);
      std::copy(p.codec.levels.begin(), p.codec.levels.end(), p.levels.begin());
      p.row_ptr.assign(size_t(rows) + 1, 0);
      parts_.push_back(std::move(p));
    }
  }
}

size_t CodebookKvCache::bytes() const {
  size_t b = 0;
  for (const Part& p : parts_)
    b += p.codes.size() + p.sz.size() * sizeof(float) + p.row_ptr.size() * sizeof(uint32_t) +
         (p.col.size() + p.val.size()) * sizeof(uint16_t) +
         (p.codec.lo.size() + p.codec.hi.size() + p.ch_scale.size() + p.ch_zero.size() + p.levels.size()) *
             sizeof(float);
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
      p.sz[size_t(2 * r)] = tr.scale();
      p.sz[size_t(2 * r + 1)] = tr.zero();
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
  // level·s + z with s, z the range's scale() and zero(): nuq::decode's arithmetic.
  const float* lv = p.levels.data();
  for (int64_t r = 0; r < n; ++r) {
    const uint8_t* codes = p.codes.data() + r * row_bytes_;
    float* o = out + r * kv_dim_;
    if (p.codec.per_channel) {
      for (int64_t c = 0; c < kv_dim_; ++c)
        o[c] = lv[detail::cb_code(codes, c, bits_)] * p.ch_scale[size_t(c)] + p.ch_zero[size_t(c)];
    } else {
      const float s = p.sz[size_t(2 * r)], z = p.sz[size_t(2 * r + 1)];
      for (int64_t c = 0; c < kv_dim_; ++c) o[c] = lv[detail::cb_code(codes, c, bits_)] * s + z;
    }
    for (uint32_t i = p.row_ptr[size_t(r)]; i < p.row_ptr[size_t(r) + 1]; ++i) o[p.col[i]] = f16_to_f32(p.val[i]);
  }
}

int64_t CodebookKvCache::rows_written(int layer) const {
  SINKQ_CHECK(layer >= 0 && layer < layers_, "codebook KV: layer {} of {}", layer, layers_);
  return parts_[size_t(layer) * 2].rows;
}

CbRows CodebookKvCache::rows(int layer, bool value, int head, int head_dim) const {
  SINKQ_CHECK(layer >= 0 && layer < layers_, "codebook KV: layer {} of {}", layer, layers_);
  SINKQ_CHECK(head_dim >= 1 && head >= 0 && int64_t(head + 1) * head_dim <= kv_dim_,
              "codebook KV: head {} of dimension {} outside kv_dim {}", head, head_dim, kv_dim_);
  SINKQ_CHECK(int64_t(head_dim) * bits_ % 8 == 0,
              "codebook KV: a head of {} channels at {} bits is not a whole number of bytes (the kernels need "
              "byte-aligned head slices: head_dim a multiple of 8)",
              head_dim, bits_);
  const Part& p = parts_[size_t(layer) * 2 + value];
  CbRows r;
  r.codes = p.codes.data() + int64_t(head) * head_dim * bits_ / 8;
  r.ld = row_bytes_;
  r.bits = bits_;
  r.levels = p.levels.data();
  if (p.codec.per_channel) {
    r.ch_scale = p.ch_scale.data() + int64_t(head) * head_dim;
    r.ch_zero = p.ch_zero.data() + int64_t(head) * head_dim;
  } else {
    r.row_sz = p.sz.data();
  }
  r.row_ptr = p.row_ptr.data();
  r.col = p.col.data();
  r.val = p.val.data();
  r.col0 = head * head_dim;
  return r;
}

}  // namespace sinkq::lowbit
