// sinkq/lowbit/kv_kernels.h — a KV cache body stored in a KV format (formats/packed_format.h kKvFormats) and
// causal GQA attention over [fp32 prefix; int8 / int4 body].
//
// Store: new K rows (after RoPE) and V rows [T, kv_dim] fp32 are quantized with quant::
// compute_params (dynamic formats) or the calibrated Params (static formats) and
// quant::quantize_to_int under kv_spec(format, head_dim): the same codes and scales as the
// simulator's fake_quant hooks at sites k / v (quant/sim.h), so dequantize() returns exactly the
// simulator's values.
//
// Attention (one layer; shapes as kernels/ops.h attention): q [T, n_heads, head_dim] fp32, the
// fp32 prefix segment (KvSegment, absolute positions 0..P-1, never quantized), then body rows
// 0..n_past+T-1 (the T new ones already stored). Per (token t, head h, kv head g = h / group):
//   scores  prefix j: scale·(q·k_j)                   (the fp32 kernel of kernels/ops.h)
//           body j:   scale·(s_j · Σ_d q_d·l_jd)      l_jd = c_jd + code_offset - z_j, an exact
//                     small integer formed in int32 before the conversion to fp32 (for asymmetric
//                     formats this is s·(Σ q c − z' Σ q) without the cancellation of the two sums)
//   softmax over both segments (the fp32 exp_shift_sum of kernels/ops.h, same ISA)
//   out     Σ_prefix p_j v_j + Σ_body (p_j s_j)·l_jd, the two segments added at the end.
// Differences from fp32 attention over the dequantized cache (the simulator): fp32 rounding only
// (s·l is not rounded to fp32 first, and the summation order differs); tests/lowbit/kv_test.cc
// states the bound. Paths: scalar, AVX2, AVX-512 (F+BW), chosen by active_isa() on every call
// (SINKQ_ISA forces one). Threads: OpenMP over (token, head) pairs (num_threads()); results do
// not depend on the thread count.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "formats/quantizer.h"
#include "kernels/cpu_features.h"
#include "kernels/ops.h"
#include "lowbit/formats.h"

namespace sinkq::lowbit {

// The rows of one kv head of one K or V body tensor, as the kernels read them.
struct KvRows {
  const uint8_t* codes = nullptr;  // row j's head slice at codes + j·ld
  int64_t ld = 0;                  // bytes between rows (kv_row_bytes)
  const float* scale = nullptr;    // row j's scale at scale[j·ls]
  int64_t ls = 0;                  // 0 for static formats (one scale for every row)
  const uint8_t* zero = nullptr;   // asymmetric: row j's zero point at zero[j·ls]; else nullptr
  int bits = 8;
};

class PackedKvCache {
 public:
  // A body of `capacity` rows for a model with these dimensions. Static formats take the
  // calibrated params of every layer's K and V (quant::Params of kv_spec(format, head_dim)'s
  // granularity over kv_heads·head_dim columns, bits and symmetry of the format). Throws
  // sinkq::Error for a non-KV format, int4 with an odd head_dim, or params that do not fit.
  // Only layers [held_begin, held_end) (held_end < 0: to the last) hold rows: a pipeline stage
  // (dist/pipeline.h) keeps its own layers' KV; the others have capacity 0 and are never used.
  PackedKvCache(PackedFormat format, int num_layers, int kv_heads, int head_dim, int64_t capacity,
                std::vector<quant::Params> static_k = {}, std::vector<quant::Params> static_v = {},
                int held_begin = 0, int held_end = -1);

  PackedFormat format() const { return format_; }
  const FormatDesc& info() const { return kv_traits(format_); }
  int num_layers() const { return layers_; }
  int kv_heads() const { return kv_heads_; }
  int head_dim() const { return head_dim_; }
  int64_t kv_dim() const { return int64_t(kv_heads_) * head_dim_; }
  int64_t capacity() const { return capacity_; }
  size_t bytes() const;  // codes + scales + zeros of every layer (kv_cache_bytes)

  // Quantizes k, v [T, kv_dim] fp32 into body rows [row0, row0 + T) of `layer` (overwriting).
  // Throws sinkq::Error on non-finite values with dynamic formats (as compute_params does).
  void store(int layer, int64_t row0, const float* k, const float* v, int64_t T);
  // x̂ of rows [row0, row0 + n) of the layer's K (value = false) or V, [n, kv_dim] fp32: exactly
  // quant::dequantize of the stored codes and params.
  void dequantize(int layer, bool value, int64_t row0, int64_t n, float* out) const;
  KvRows rows(int layer, bool value, int head) const;

 private:
  struct Part {
    std::vector<uint8_t> codes;  // [capacity, kv_row_bytes]
    std::vector<float> scales;   // kv_param_count entries
    std::vector<uint8_t> zeros;  // asymmetric only
  };
  void store_part(Part& part, const quant::Params* fixed, int64_t row0, const float* x, int64_t T);
  PackedFormat format_;
  int layers_ = 0, kv_heads_ = 0, head_dim_ = 0;
  int64_t capacity_ = 0;
  std::vector<Part> parts_;             // [layer][K, V]
  std::vector<quant::Params> static_;   // [layer][K, V] (static formats)
};

// Causal GQA attention of layer `layer` (see the top of this file). s.n_kv_heads and
// s.head_dim must match the cache; n_past + T <= capacity. out may not alias q.
void attention_packed(const AttnShape& s, const float* q, const KvSegment& prefix, const PackedKvCache& c,
                      int layer, int64_t n_past, int64_t T, float* out);

// The path attention_packed takes now: "scalar", "avx2" or "avx512".
std::string_view kv_isa_name();

namespace ref {
// The oracle: the same attention in double from the stored codes (x̂ = s·l exact in double),
// softmax and sums in double, one rounding to fp32 at the end.
void attention_packed(const AttnShape& s, const float* q, const KvSegment& prefix, const PackedKvCache& c,
                      int layer, int64_t n_past, int64_t T, float* out);
}  // namespace ref

namespace detail {
// Largest head_dim the kernels take (their per-row accumulators live on the stack).
inline constexpr int kKvMaxHeadDim = 512;
// The stored int8 code of column d of a row slice (8-bit: one byte; 4-bit: a nibble).
inline int kv_code(const uint8_t* row, int d, int bits) { return formats::uniform::code_at(row, d, bits); }
// z - code_offset of row j (0 for symmetric formats): level l = c - kv_zc(r, j).
inline int kv_zc(const KvRows& r, int64_t j) {
  return r.zero ? int(r.zero[j * r.ls]) - (1 << (r.bits - 1)) : 0;
}
// The per-ISA serial kernels (kv_scalar.cc, kv_avx2.cc, kv_avx512.cc). They take the G query
// heads that share one kv head together, so each body row is decoded once per group (GQA).
// q: [G, ldq] with ldq >= D a multiple of 16 and q[i·ldq + d] = 0 for d in [D, ldq) (padded).
struct KvTable {
  // s[i·lds + j] = scale · (s_j · Σ_{d<D} q[i·ldq + d]·l_jd), heads i < G, body rows j < n of r.
  void (*scores)(const float* q, int64_t ldq, int G, const KvRows& r, int64_t n, int D, float scale, float* s,
                 int64_t lds);
  // out[i·D + d] = alpha[i] · Σ_j (p[i·ldp + j]·s_j)·l_jd for i < G, d < D (overwrites out).
  // p is scratch: its entries are replaced by p·s_j (computed once, not once per column chunk).
  void (*weighted_sum)(float* p, int64_t ldp, int G, const KvRows& r, int64_t n, int D, const float* alpha,
                       float* out);
};
const KvTable& kv_table_scalar();
const KvTable& kv_table_avx2();
const KvTable& kv_table_avx512();
const KvTable& kv_table_for(Isa isa);
}  // namespace detail

}  // namespace sinkq::lowbit
