// sinkq/lowbit/codebook_kv.h — KVQuant's packed KV body: per layer and K / V, b-bit codebook
// indices (formats/nuq.h), each token's range when its vectors are tokens, and the dense-and-sparse
// outliers as fp16 values in an append-only CSR by token.
//
// Layout per (layer, K|V):
//   codes     [capacity, ceil(kv_dim·bits/8)] bytes: the row's kv_dim indices as a little-endian
//             bit stream (index c at bits [c·b, (c+1)·b)); an outlier's index is 0 (unused).
//   ranges    token vectors: [capacity] × (scale, zero) fp32 of the row's range (nuq::Range::
//             scale() / zero()), so a decoded value is nuq::decode's exact bits, level·s + z (fp16
//             here would move values the simulator codes on its fp32 range); channel vectors: the
//             codec's calibrated lo / hi, held as per-channel (scale, zero) arrays.
//   outliers  CSR by token: row_ptr [capacity + 1] uint32, then (channel uint16, value fp16) per
//             outlier in row order. Decision: by token (CSR), not by channel (CSC), for Keys too:
//             appending a token appends its entries at the end and one row pointer, and nothing
//             written before moves (a CSC of per-channel Keys would insert into every column).
//             Rows are written in order (row0 = the rows held so far, or fewer after a reset /
//             rewind: entries past row0 are dropped first).
// Values decode to nuq::Codec::apply's bits: the packed store equals the simulator's fake quant
// element for element.
//
// Attention (attention_codebook): causal GQA attention of one layer over [fp32 prefix; this
// body] without decoding the body into fp32 first — the fused LUT kernels. Per (token, kv head)
// the G query heads of the group are taken together, so each body row is decoded once per group.
//   scores  row j's head slice decoded into an L1 buffer: the b-bit indices are unpacked W at a
//           time (AVX2: one 32-bit load, broadcast, vpsrlvd by lane·b, mask; AVX-512: two such
//           dwords), looked up in the level table with vpermps (4 bits on AVX2: two vpermps and a
//           blend on bit 3; AVX-512: one vpermps over 16 levels), x̂ = level·s + z (mul then add,
//           no FMA: the simulator's bits); the row's outliers (CSR) patched in; pre-RoPE keys
//           rotated at their absolute position (cached cos | sin rows, rope_apply_cs's formula);
//           then dotted with the G query rows.
//   softmax the fp32 exp_shift_sum of kernels/ops.h over [prefix; body] (same ISA).
//   out     Σ_j p_j·x̂_j chunk-outer in blocks of rows (a block's codes stay in L1 for the D/W
//           column passes), the codes decoded through the level table as above, the outliers
//           added as a sparse correction p_j·(v − x̂_j(0)) afterwards (an outlier's stored index
//           is 0).
// Differences from fp32 attention over the dequantized cache (what the simulator computes): the
// summation order, the RoPE rounding of the decoded keys, and R3 when the model is rotated (the
// caller un-rotates q once: q·H(k) = H(q)·k for the orthonormal symmetric H); tests/lowbit/
// codebook_attn_test.cc states the bound. Paths: scalar, AVX2, AVX-512 (active_isa()).
//
// bytes() counts what is held: codes and ranges for the capacity, outliers as stored (their count
// depends on the data for channel vectors), the level tables, channel scales and the kernels' slack.
#pragma once

#include <cstdint>
#include <vector>

#include "formats/nuq.h"
#include "formats/nuq_stream.h"
#include "kernels/cpu_features.h"
#include "kernels/ops.h"

namespace sinkq::lowbit {

// The rows of one kv head of a layer's K or V body, as the kernels read them (row j of the view).
struct CbRows {
  const uint8_t* codes = nullptr;  // row j's head slice at codes + j·ld (byte aligned: D·bits % 8 == 0)
  int64_t ld = 0;                  // bytes between rows
  int bits = 4;
  const float* levels = nullptr;   // 2^bits levels (padded with zeros to 16)
  const float* ch_scale = nullptr;  // channel vectors: the head's D column scales / zeros (padded
  const float* ch_zero = nullptr;   // with zeros to a multiple of 16 past the last head); else null
  const float* row_sz = nullptr;    // token vectors: row j's scale at row_sz[2j], zero at [2j + 1]
  const uint32_t* row_ptr = nullptr;  // row j's outliers: entries [row_ptr[j], row_ptr[j + 1])
  const uint16_t* col = nullptr;      // of (channel of the whole kv row, fp16 value)
  const uint16_t* val = nullptr;
  int col0 = 0;  // the head's first channel: entries with col in [col0, col0 + D) are this head's
  // The view advanced by j0 rows.
  CbRows from(int64_t j0) const {
    CbRows r = *this;
    r.codes += j0 * ld;
    if (r.row_sz) r.row_sz += 2 * j0;
    r.row_ptr += j0;
    return r;
  }
};

class CodebookKvCache {
 public:
  // codecs_k / codecs_v: one per layer (bits = log2 of their level count, 2..4; channel codecs with
  // kv_dim ranges). Throws sinkq::Error when they do not fit.
  // Only layers [held_begin, held_end) (held_end < 0: to the last) hold rows (a pipeline stage).
  CodebookKvCache(int num_layers, int64_t kv_dim, int64_t capacity, std::vector<formats::nuq::Codec> codecs_k,
                  std::vector<formats::nuq::Codec> codecs_v, int held_begin = 0, int held_end = -1);

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
  // Rows written so far (K and V of every layer are written together).
  int64_t rows_written(int layer) const;
  // The view of kv head `head` (head_dim columns from head·head_dim) of the layer's K or V.
  // Throws when head_dim·bits is not a whole number of bytes.
  CbRows rows(int layer, bool value, int head, int head_dim) const;

 private:
  struct Part {
    formats::nuq::Codec codec;
    std::vector<uint8_t> codes;  // [capacity, row_bytes] + kCodeSlack (the kernels load whole words)
    std::vector<float> sz;       // token vectors: [capacity][scale, zero]
    std::vector<float> ch_scale, ch_zero;  // channel vectors: [kv_dim + 16]
    std::vector<float> levels;   // the codec's levels padded with zeros to 16
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

// Causal GQA attention of `layer` over [prefix; body rows 0..n_past + T) (the T new rows already
// stored), shapes as kernels/ops.h attention. q: [T, n_heads, head_dim] after RoPE, as the prefix
// keys see it; q_body: the same queries in the body keys' basis (a rotated model's prefix keys
// carry R3, its pre-RoPE body keys do not: the caller passes q un-rotated), or null for q. cs: null
// when the body keys are stored after RoPE; else the keys were stored before RoPE and body row j is
// rotated by the cos | sin row (rope_cos_sin of its absolute position) at cs + j·head_dim, j <
// n_past + T. out may not alias q.
void attention_codebook(const AttnShape& s, const float* q, const float* q_body, const KvSegment& prefix,
                        const CodebookKvCache& c, int layer, int64_t n_past, int64_t T, const float* cs, float* out);

namespace ref {
// The oracle: the same attention in double over the cache's dequantized values (RoPE in double).
void attention_codebook(const AttnShape& s, const float* q, const float* q_body, const KvSegment& prefix,
                        const CodebookKvCache& c, int layer, int64_t n_past, int64_t T, const float* cs, float* out);
}  // namespace ref

namespace detail {
inline constexpr int64_t kCodeSlack = 16;  // bytes past the last row the kernels may load (not use)
// Index `index` of a bit stream of `bits`-bit codes (may read the byte after the code's last one).
inline uint32_t cb_code(const uint8_t* row, int64_t index, int bits) {
  return formats::nuq::stream_code(row, index, bits);
}
// The per-ISA serial kernels over the body of one kv head (scalar: codebook_attn.cc; AVX2 /
// AVX-512: cb_simd.inc in kv_avx2.cc / kv_avx512.cc). q: [G, ldq], ldq >= D a multiple of 16,
// zero-padded past D.
struct CbTable {
  // s[i·lds + j] = scale · Σ_d q[i·ldq + d]·k_jd for heads i < G and rows j < n, k_j = row j
  // decoded (outliers patched) and, with cs, rotated by the cos | sin row at cs + j·D.
  void (*scores)(const float* q, int64_t ldq, int G, const CbRows& r, int64_t n, int D, const float* cs,
                 float scale, float* s, int64_t lds);
  // out[i·D + d] = alpha[i] · Σ_j p[i·ldp + j]·v_jd for i < G, d < D (overwrites out).
  void (*weighted_sum)(const float* p, int64_t ldp, int G, const CbRows& r, int64_t n, int D, const float* alpha,
                       float* out);
};
const CbTable& cb_table_scalar();
const CbTable& cb_table_avx2();
const CbTable& cb_table_avx512();
const CbTable& cb_table_for(Isa isa);
// Row j's value in column c of the view (decoded, outliers patched): the scalar definition.
float cb_value(const CbRows& r, int64_t j, int c);
}  // namespace detail

}  // namespace sinkq::lowbit
