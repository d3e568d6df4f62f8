// sinkq/lowbit/formats.h — the C++ API of the packed low-bit formats: lookup by value and by
// name, the quantizer spec of a format, and PackedTensor (one matrix in one format) with its
// scalar pack / unpack / dequantize.
//
// The formats themselves (PackedFormat values, the pieces each format is composed of, the tables
// kFormats / kKvFormats and the byte layout) are plain data in formats/packed_format.h, shared with
// CUDA; this header adds what needs std containers and exceptions. A PackedTensor holds the codes
// and parameters of one matrix X[rows, cols] (weights: [out, in] as HF nn.Linear; activations:
// [tokens, features]). The codes are exactly quant::quantize_to_int's int8 codes (quantizer.h)
// under quant_spec(format), packed with the codebook rows of packed_format.h; the scales / zero
// points exactly its quant::Params. So dequantize(pack(quantize_to_int(x))) == quant::fake_quant(x)
// bit for bit (tested).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "formats/packed_format.h"
#include "formats/quantizer.h"

namespace sinkq::lowbit {

using formats::FormatDesc;
using formats::kFormats;
using formats::kKvFormats;
using formats::PackedFormat;
using formats::Role;

namespace detail {
// The nibble layout of 4-bit rows (formats/uniform_int.h), for the kernels.
using formats::uniform::nibble_code;
using formats::uniform::pack_nibbles;
}  // namespace detail

// The traits row of f; throws sinkq::Error for a value that is not a PackedFormat (e.g. read
// from a file).
const FormatDesc& traits(PackedFormat f);
// By name ("w4_g128_asym", ...); throws sinkq::Error listing the names.
PackedFormat parse_format(std::string_view name);

// Code bytes of one row of `cols` columns (4-bit: rounded up to a whole byte).
constexpr int64_t row_bytes(const FormatDesc& t, int64_t cols) { return formats::uniform::row_bytes(t.bits, cols); }

// The quantizer spec whose quantize_to_int codes this format stores (bits, mode, granularity,
// group size; clip_ratio as given).
quant::QuantSpec quant_spec(PackedFormat f, float clip_ratio = 1.0f);

// One matrix in one format (layout: formats/packed_format.h).
struct PackedTensor {
  PackedFormat format = PackedFormat::W8_PerRow;
  int64_t rows = 0, cols = 0;
  std::vector<uint8_t> codes;   // [rows, row_bytes(cols)]
  std::vector<float> scales;    // [rows, groups()], or [1] for per-tensor activations
  std::vector<uint8_t> zeros;   // [rows, groups()], asymmetric formats only
  const FormatDesc& info() const { return traits(format); }
  int64_t groups() const;       // scales per row: cols / group, or 1
  size_t bytes() const { return codes.size() + 4 * scales.size() + zeros.size(); }
};

// Packs quant::quantize_to_int codes q[rows, cols] with their params p (computed for
// quant_spec(f, any clip)). Throws sinkq::Error if p does not belong to the format, does not fit
// [rows, cols], or a code is outside the format's range.
PackedTensor pack(PackedFormat f, const int8_t* q, const quant::Params& p, int64_t rows, int64_t cols);
// The int8 codes [rows, cols] back (what quantize_to_int produced).
std::vector<int8_t> unpack_codes(const PackedTensor& t);
// The quant::Params back (zero points as int32), for quant::dequantize / fake_quant.
quant::Params params_of(const PackedTensor& t);
// x̂[rows, cols] = exactly quant::dequantize(unpack_codes(t), params_of(t)), through the
// codebook's dequantize row (formats/packed_format.h kCodebookRows), one row or group at a time.
void dequantize(const PackedTensor& t, float* out);
// compute_params on x itself (weights: per row / group; activations: dynamic per token, or a
// per-tensor scale from x) + quantize_to_int + pack.
PackedTensor quantize(PackedFormat f, const float* x, int64_t rows, int64_t cols, float clip_ratio = 1.0f);

// ---- KV cache formats ---------------------------------------------------------------------
//
// The quantized body of a KV cache (layout: formats/packed_format.h kKvFormats). Codes and params
// are quant::quantize_to_int / compute_params under kv_spec(format, head_dim): dequantized values
// are the simulator's fake_quant values bit for bit (quant/sim.h KvSim). Static scales / zeros are
// the calibrated quant::Params (PerHeadShared [1, H] or PerTensor [1, 1]) of that layer's K or V.

// The traits row of a KV format; throws sinkq::Error for any other value.
const FormatDesc& kv_traits(PackedFormat f);
// By name ("kv4_per_head", ...); throws sinkq::Error listing the names.
PackedFormat parse_kv_format(std::string_view name);
// The KV format of (bits, symmetric, granularity); sinkq::Error saying what no format stores.
PackedFormat kv_format(int bits, bool symmetric, quant::Granularity g);
// The quantizer spec whose codes / params the format stores for rows of kv_heads·head_dim columns
// (head_dim set for the per-head granularities; clip_ratio as given, used only by calibration).
quant::QuantSpec kv_spec(PackedFormat f, int head_dim, float clip_ratio = 1.0f);
// Code bytes of one K (or V) row of kv_dim columns.
constexpr int64_t kv_row_bytes(const FormatDesc& t, int64_t kv_dim) { return kv_dim * t.bits / 8; }
// Scale (and zero) entries of one layer's K (or V) for `capacity` rows.
int64_t kv_param_count(const FormatDesc& t, int kv_heads, int64_t capacity);
// Bytes of a whole body cache (every layer, K and V): codes + scales + zeros.
int64_t kv_cache_bytes(PackedFormat f, int num_layers, int kv_heads, int head_dim, int64_t capacity);

}  // namespace sinkq::lowbit
