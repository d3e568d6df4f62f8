// sinkq/cuda/attention_kernels.h — the launch interface of the device attention (cuda/attention.h):
// plain structs of device pointers, kernels in attention_kernels.cu (nvcc only).
#pragma once

#include <cstdint>

namespace sinkq::cuda::detail {

// A layer's K or V body on the device, as lowbit::PackedKvCache holds it: kv head g's slice of
// row j at codes + j·ld + g·head_dim·bits/8, its scale at scale[j·ls + g·head_step] (the rows
// lowbit::KvRows describes, one layer at a time), its zero point likewise (asymmetric formats).
struct KvBodyDev {
  const uint8_t* codes = nullptr;
  int64_t ld = 0;
  const float* scale = nullptr;
  int64_t ls = 0, head_step = 0;
  const uint8_t* zero = nullptr;
  int bits = 8;
};

inline constexpr int kAttnMaxHeads = 16;    // query heads per kv head (GQA group) a block takes
inline constexpr int kAttnMaxHeadDim = 256;
inline constexpr int kAttnSplitRows = 128;  // keys per split (one thread block)

// Causal GQA attention of T query tokens over [fp32 prefix (P rows); packed body], flash-decoding:
// kernel 1 gives each (token, kv head, split of kAttnSplitRows visible keys) its softmax partials
// (max, sum, weighted sum per query head); kernel 2 merges the splits in order.
struct AttnArgs {
  int n_heads = 0, n_kv_heads = 0, head_dim = 0, window = 0;
  float scale = 0.0f, softcap = 0.0f;
  const float* q = nullptr;  // [T, n_heads, head_dim]
  const float* pk = nullptr;  // prefix [P, n_kv_heads, head_dim]
  const float* pv = nullptr;
  int64_t P = 0, n_past = 0, T = 0;
  KvBodyDev k, v;
  int nsplit = 0;
  float* part = nullptr;      // [T, n_kv_heads, nsplit, group, head_dim + 2]
  float* out = nullptr;       // [T, n_heads, head_dim]
};
void launch_attention(const AttnArgs& a, void* stream);

// A layer's K or V codebook body on the device (KVQuant's nuqX, lowbit/codebook_kv.h), as
// lowbit::CodebookKvCache holds it: row b's b-bit index stream at codes + b·ld (kv head g's slice
// from bit g·head_dim·bits), 16 levels (padded), per-channel (scale, zero) arrays [kv_dim + 16] or
// per-row (scale, zero) pairs, and the dense-and-sparse outliers as a CSR by row (row_ptr; channel
// of the whole kv row, fp16 value).
struct CbBodyDev {
  const uint8_t* codes = nullptr;
  int64_t ld = 0;
  int bits = 4;
  const float* levels = nullptr;
  const float* ch_scale = nullptr;  // channel vectors (else null)
  const float* ch_zero = nullptr;
  const float* row_sz = nullptr;    // token vectors: row b's scale at [2b], zero at [2b + 1] (else null)
  const uint32_t* row_ptr = nullptr;
  const uint16_t* col = nullptr;
  const uint16_t* val = nullptr;
};

// Rows of a codebook body a thread block decodes into shared memory at a time (64: at a group of 1
// query head, half the block's threads score a row each).
inline constexpr int kCbChunkRows = 64;

// Attention over [fp32 prefix; codebook body] (lowbit::attention_codebook's semantics): prefix keys
// scored with q, body keys with q_body (= q when null), body keys rotated by cs rows when given
// (pre-RoPE keys: row b by cs + b·head_dim). The same splits and merge as launch_attention.
struct CbAttnArgs {
  int n_heads = 0, n_kv_heads = 0, head_dim = 0, window = 0;
  float scale = 0.0f, softcap = 0.0f;
  const float* q = nullptr;
  const float* q_body = nullptr;
  const float* pk = nullptr;
  const float* pv = nullptr;
  int64_t P = 0, n_past = 0, T = 0;
  CbBodyDev k, v;
  const float* cs = nullptr;
  int nsplit = 0;
  float* part = nullptr;
  float* out = nullptr;
};
// Dynamic shared memory the codebook kernel needs for a shape (bytes).
size_t attention_codebook_smem(int group, int head_dim);
void launch_attention_codebook(const CbAttnArgs& a, void* stream);

// Stores rows of a dynamic KV format: x [T, kv_heads·head_dim] fp32 -> body rows [row0, row0 + T)
// (codes, scales, zero points), one thread block per (row, span): a span is a kv head's slice
// (per-head formats) or the whole row (per-token). Per span, as quant::compute_params +
// quantize_to_int: the range [min(0, min x), max(0, max x)] (symmetric: max |x|), s = guard((hi -
// lo) / (2^N - 1)) and z = rne(clamp(-lo / s, 0, 2^N - 1)) (symmetric: s = guard(absmax /
// (2^(N-1) - 1)), z = 0), codes = encode(x, s, z), packed as uniform_int.h's rows. A span with a
// non-finite value sets *bad_row = min(*bad_row, row) and writes nothing. Static formats (fixed):
// the span's calibrated scale and zero point are read from scales[span] / zeros[span] (one per kv
// head, or one for the tensor) and only the codes are written, as quant::quantize_to_int does
// (±inf clamped, NaN to the lowest code: nothing refused).
struct KvStoreArgs {
  const float* x = nullptr;
  int64_t T = 0, row0 = 0;
  int kv_heads = 0, head_dim = 0, bits = 8;
  bool symmetric = true, per_head = true, fixed = false;
  uint8_t* codes = nullptr;  // [capacity, kv_heads·head_dim·bits/8]
  float* scales = nullptr;   // [capacity, spans per row]
  uint8_t* zeros = nullptr;  // asymmetric: [capacity, spans per row]
  int64_t* bad_row = nullptr;
};
void launch_kv_store(const KvStoreArgs& a, void* stream);

}  // namespace sinkq::cuda::detail
