// sinkq/lowbit/formats.h — the packed low-bit formats of weights and activations, as data.
//
// Every format is one PackedFormat value (fixed, explicit: it may be written into artifacts) and
// one constexpr FormatTraits row of kFormats. A PackedTensor holds the codes and parameters of
// one matrix X[rows, cols] in that format (weights: [out, in] as HF nn.Linear; activations:
// [tokens, features]). The codes are exactly quant::quantize_to_int's int8 codes (quantizer.h)
// under quant_spec(format), packed; the scales / zero points exactly its quant::Params. So
// dequantize(pack(quantize_to_int(x))) == quant::fake_quant(x) bit for bit (tested).
//
// Byte layout (little-endian, planar: three separate arrays, rows contiguous):
//   codes   [rows, row_bytes(format, cols)]  uint8. 8-bit: one int8 code per byte (two's
//           complement). 4-bit: two codes per byte, the low nibble holds the even column 2j, the
//           high nibble column 2j+1; a nibble is the low 4 bits of the int8 code (two's complement,
//           codes in [-8, 7]: symmetric q, asymmetric q - 8 = quant::code_offset). A row starts on
//           a byte boundary; with an odd column count its last high nibble is 0.
//   scales  [rows, groups] fp32 (weights per row / per group; activations per token), or [1]
//           (per-tensor activations). fp32, not fp16: an fp16 scale would change x̂ = s·q and the
//           packed tensor would no longer reproduce the simulator's fake_quant values exactly.
//   zeros   [rows, groups] uint8 zero points z in [0, 2^N - 1]; asymmetric formats only.
//   groups = cols / group for per-group formats, 1 otherwise.
// Only symmetric activations: x̂ = s·c keeps the integer GEMM free of activation zero points.
// SIMD-friendly interleaving is not a file format: lowbit/kernels.h repacks at load time.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "formats/quantizer.h"

namespace sinkq::lowbit {

// Values are fixed (artifacts); weights 1..31, activations 32..63.
enum class PackedFormat : uint8_t {
  W8_PerRow = 1,       // int8 sym, one fp32 scale per output channel
  W4_PerRow = 2,       // int4 sym, one fp32 scale per output channel
  W4_G32 = 3,          // int4 sym, one fp32 scale per 32 input columns
  W4_G64 = 4,
  W4_G128 = 5,
  W4_G32_Asym = 6,     // int4 asym, fp32 scale + uint8 zero point per 32 input columns
  W4_G64_Asym = 7,
  W4_G128_Asym = 8,
  A8_PerToken = 32,    // int8 sym, one fp32 scale per token (dynamic)
  A8_PerTensor = 33,   // int8 sym, one fp32 scale for all tokens (static, calibrated)
  A4_PerToken = 34,    // int4 sym, packed nibbles, per-token scale
  A4_PerTensor = 35,   // int4 sym, packed nibbles, per-tensor scale
  // KV cache bodies (64..95; kKvFormats below). "head" = one of the kv_heads slices of a row.
  KV8_PerHead = 64,            // dynamic: one fp32 scale per (token, kv head), int8 sym
  KV4_PerHead = 65,            //   int4 sym
  KV8_PerHead_Asym = 66,       //   + one uint8 zero point per (token, kv head)
  KV4_PerHead_Asym = 67,
  KV8_PerToken = 68,           // dynamic: one fp32 scale per token (the whole kv_dim row)
  KV4_PerToken = 69,
  KV8_PerToken_Asym = 70,
  KV4_PerToken_Asym = 71,
  KV8_StaticHead = 72,         // static: one calibrated fp32 scale per kv head for every token
  KV4_StaticHead = 73,
  KV8_StaticHead_Asym = 74,
  KV4_StaticHead_Asym = 75,
  KV8_StaticTensor = 76,       // static: one calibrated fp32 scale for the whole layer's K (or V)
  KV4_StaticTensor = 77,
  KV8_StaticTensor_Asym = 78,
  KV4_StaticTensor_Asym = 79,
};

enum class Role : uint8_t { Weight, Activation, Kv };

struct FormatTraits {
  PackedFormat format;
  std::string_view name;             // snake_case, for flags and messages
  Role role;
  int bits;                          // 8 or 4
  bool symmetric;
  quant::Granularity granularity;    // PerRow (weights: output channel; activations: token),
                                     // PerGroup (weights), PerTensor (activations)
  int group;                         // columns per scale for PerGroup; 0: the whole row / tensor
  int group_code_bytes;              // code bytes of one group (group·bits/8); 0 when group == 0
  int group_param_bytes;             // parameter bytes per scale: fp32 scale (+ uint8 zero)
  PackedFormat paired;               // weights: the activation format of the canonical pairing
                                     // (W8A8, W4A8); activations: itself. The kernels accept any
                                     // activation format with any weight format.
};

inline constexpr FormatTraits kFormats[] = {
    // format                       name             role              bits sym   granularity                  G    code  par  paired
    {PackedFormat::W8_PerRow,    "w8_per_row",    Role::Weight,     8, true,  quant::Granularity::PerRow,    0,   0,   4, PackedFormat::A8_PerToken},
    {PackedFormat::W4_PerRow,    "w4_per_row",    Role::Weight,     4, true,  quant::Granularity::PerRow,    0,   0,   4, PackedFormat::A8_PerToken},
    {PackedFormat::W4_G32,       "w4_g32",        Role::Weight,     4, true,  quant::Granularity::PerGroup,  32,  16,  4, PackedFormat::A8_PerToken},
    {PackedFormat::W4_G64,       "w4_g64",        Role::Weight,     4, true,  quant::Granularity::PerGroup,  64,  32,  4, PackedFormat::A8_PerToken},
    {PackedFormat::W4_G128,      "w4_g128",       Role::Weight,     4, true,  quant::Granularity::PerGroup,  128, 64,  4, PackedFormat::A8_PerToken},
    {PackedFormat::W4_G32_Asym,  "w4_g32_asym",   Role::Weight,     4, false, quant::Granularity::PerGroup,  32,  16,  5, PackedFormat::A8_PerToken},
    {PackedFormat::W4_G64_Asym,  "w4_g64_asym",   Role::Weight,     4, false, quant::Granularity::PerGroup,  64,  32,  5, PackedFormat::A8_PerToken},
    {PackedFormat::W4_G128_Asym, "w4_g128_asym",  Role::Weight,     4, false, quant::Granularity::PerGroup,  128, 64,  5, PackedFormat::A8_PerToken},
    {PackedFormat::A8_PerToken,  "a8_per_token",  Role::Activation, 8, true,  quant::Granularity::PerRow,    0,   0,   4, PackedFormat::A8_PerToken},
    {PackedFormat::A8_PerTensor, "a8_per_tensor", Role::Activation, 8, true,  quant::Granularity::PerTensor, 0,   0,   4, PackedFormat::A8_PerTensor},
    {PackedFormat::A4_PerToken,  "a4_per_token",  Role::Activation, 4, true,  quant::Granularity::PerRow,    0,   0,   4, PackedFormat::A4_PerToken},
    {PackedFormat::A4_PerTensor, "a4_per_tensor", Role::Activation, 4, true,  quant::Granularity::PerTensor, 0,   0,   4, PackedFormat::A4_PerTensor},
};

namespace detail {
// One nibble pair: the low nibble holds the even column. Codes in [-8, 7].
constexpr uint8_t pack_nibbles(int even, int odd) { return uint8_t((even & 0xF) | ((odd & 0xF) << 4)); }
constexpr int8_t nibble_code(uint8_t byte, bool high) {
  return int8_t((((high ? byte >> 4 : byte) & 0xF) ^ 8) - 8);  // sign-extend 4 bits
}

constexpr const FormatTraits* find(PackedFormat f) {
  for (const FormatTraits& t : kFormats)
    if (t.format == f) return &t;
  return nullptr;
}

// Every row of kFormats is self-consistent (checked at compile time below).
constexpr bool row_ok(const FormatTraits& t) {
  const bool weight = t.role == Role::Weight;
  if (int(t.format) < 1 || int(t.format) > 63 || weight != (int(t.format) < 32)) return false;
  if (t.bits != 8 && t.bits != 4) return false;
  if (t.name.empty() || t.name[0] != (weight ? 'w' : 'a') || t.name[1] != char('0' + t.bits)) return false;
  const bool grouped = t.granularity == quant::Granularity::PerGroup;
  // Groups hold whole bytes and whole 8-column kernel steps; 8-bit formats are per row only.
  if (grouped != (t.group > 0) || (grouped && (t.group % 32 != 0 || t.bits != 4))) return false;
  if (t.group_code_bytes != t.group * t.bits / 8) return false;
  if (t.group_param_bytes != int(sizeof(float)) + (t.symmetric ? 0 : 1)) return false;
  if (weight) {
    if (t.granularity != quant::Granularity::PerRow && !grouped) return false;
  } else {
    if (!t.symmetric || (t.granularity != quant::Granularity::PerRow &&
                         t.granularity != quant::Granularity::PerTensor))
      return false;
  }
  const FormatTraits* p = find(t.paired);
  return p != nullptr && p->role == Role::Activation && (weight || p->format == t.format);
}

constexpr bool table_ok() {
  for (size_t i = 0; i < std::size(kFormats); ++i) {
    if (!row_ok(kFormats[i])) return false;
    for (size_t j = 0; j < i; ++j)
      if (kFormats[j].format == kFormats[i].format || kFormats[j].name == kFormats[i].name) return false;
  }
  return true;
}
}  // namespace detail

static_assert(detail::table_ok(), "kFormats: inconsistent row (see detail::row_ok)");
static_assert(sizeof(float) == 4 && sizeof(PackedFormat) == 1);
static_assert(detail::pack_nibbles(-1, 2) == 0x2F && detail::pack_nibbles(-8, 7) == 0x78);
static_assert(detail::nibble_code(0x78, false) == -8 && detail::nibble_code(0x78, true) == 7 &&
              detail::nibble_code(0x2F, false) == -1);

// The traits row of f; throws sinkq::Error for a value that is not a PackedFormat (e.g. read
// from a file).
const FormatTraits& traits(PackedFormat f);
// By name ("w4_g128_asym", ...); throws sinkq::Error listing the names.
PackedFormat parse_format(std::string_view name);

// Code bytes of one row of `cols` columns (4-bit: rounded up to a whole byte).
constexpr int64_t row_bytes(const FormatTraits& t, int64_t cols) { return t.bits == 8 ? cols : (cols + 1) / 2; }

// The quantizer spec whose quantize_to_int codes this format stores (bits, mode, granularity,
// group size; clip_ratio as given).
quant::QuantSpec quant_spec(PackedFormat f, float clip_ratio = 1.0f);

// One matrix in one format (layout: see the top of this file).
struct PackedTensor {
  PackedFormat format = PackedFormat::W8_PerRow;
  int64_t rows = 0, cols = 0;
  std::vector<uint8_t> codes;   // [rows, row_bytes(cols)]
  std::vector<float> scales;    // [rows, groups()], or [1] for per-tensor activations
  std::vector<uint8_t> zeros;   // [rows, groups()], asymmetric formats only
  const FormatTraits& info() const { return traits(format); }
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
// x̂[rows, cols] = exactly quant::dequantize(unpack_codes(t), params_of(t)).
void dequantize(const PackedTensor& t, float* out);
// compute_params on x itself (weights: per row / group; activations: dynamic per token, or a
// per-tensor scale from x) + quantize_to_int + pack.
PackedTensor quantize(PackedFormat f, const float* x, int64_t rows, int64_t cols, float clip_ratio = 1.0f);

// ---- KV cache formats ---------------------------------------------------------------------
//
// The quantized body of a KV cache (the fp32 prefix in front of it is never quantized). One
// format covers K and V of every layer; K is stored after RoPE (site k), V as projected (site v),
// exactly the rows the simulator fake-quantizes (quant/sim.h KvSim). Codes and params are
// quant::quantize_to_int / compute_params under kv_spec(format, head_dim): dequantized values are
// the simulator's fake_quant values bit for bit.
//
// Byte layout of one layer's K (V alike) for a body of `capacity` rows, H = kv_heads, D = head_dim
// (little-endian, planar: three arrays, rows contiguous, row r = body position r):
//   codes   [capacity, H, D·bits/8] uint8: the stored int8 code c = q - code_offset (quantizer.h)
//           of each element; 8-bit one per byte, 4-bit two per byte as formats.h above (low
//           nibble = even column). 4-bit needs an even D (RoPE models always have one), so every
//           head starts on a byte boundary.
//   scales  fp32: per_head [capacity, H]; per_token [capacity]; static_head [H]; static_tensor [1]
//   zeros   uint8 z in [0, 2^N - 1], same shape as scales (asymmetric formats only)
// x̂ = s·(c + code_offset - z) = s·level, level an exact small integer. Static scales / zeros are
// the calibrated quant::Params (PerHeadShared [1, H] or PerTensor [1, 1]) of that layer's K or V.
struct KvFormatTraits {
  PackedFormat format;
  std::string_view name;           // snake_case, for flags and messages
  Role role;                       // Role::Kv
  int bits;                        // 8 or 4
  bool symmetric;
  quant::Granularity granularity;  // PerHead, PerRow (token), PerHeadShared, PerTensor
  bool dynamic;                    // params from each stored row (PerHead, PerRow) or calibrated
  int param_bytes;                 // bytes per scale entry: fp32 scale (+ uint8 zero)
};

inline constexpr KvFormatTraits kKvFormats[] = {
    // format                              name                    role      bits sym    granularity                      dyn    par
    {PackedFormat::KV8_PerHead,           "kv8_per_head",          Role::Kv, 8, true,  quant::Granularity::PerHead,       true,  4},
    {PackedFormat::KV4_PerHead,           "kv4_per_head",          Role::Kv, 4, true,  quant::Granularity::PerHead,       true,  4},
    {PackedFormat::KV8_PerHead_Asym,      "kv8_per_head_asym",     Role::Kv, 8, false, quant::Granularity::PerHead,       true,  5},
    {PackedFormat::KV4_PerHead_Asym,      "kv4_per_head_asym",     Role::Kv, 4, false, quant::Granularity::PerHead,       true,  5},
    {PackedFormat::KV8_PerToken,          "kv8_per_token",         Role::Kv, 8, true,  quant::Granularity::PerRow,        true,  4},
    {PackedFormat::KV4_PerToken,          "kv4_per_token",         Role::Kv, 4, true,  quant::Granularity::PerRow,        true,  4},
    {PackedFormat::KV8_PerToken_Asym,     "kv8_per_token_asym",    Role::Kv, 8, false, quant::Granularity::PerRow,        true,  5},
    {PackedFormat::KV4_PerToken_Asym,     "kv4_per_token_asym",    Role::Kv, 4, false, quant::Granularity::PerRow,        true,  5},
    {PackedFormat::KV8_StaticHead,        "kv8_static_head",       Role::Kv, 8, true,  quant::Granularity::PerHeadShared, false, 4},
    {PackedFormat::KV4_StaticHead,        "kv4_static_head",       Role::Kv, 4, true,  quant::Granularity::PerHeadShared, false, 4},
    {PackedFormat::KV8_StaticHead_Asym,   "kv8_static_head_asym",  Role::Kv, 8, false, quant::Granularity::PerHeadShared, false, 5},
    {PackedFormat::KV4_StaticHead_Asym,   "kv4_static_head_asym",  Role::Kv, 4, false, quant::Granularity::PerHeadShared, false, 5},
    {PackedFormat::KV8_StaticTensor,      "kv8_static_tensor",     Role::Kv, 8, true,  quant::Granularity::PerTensor,     false, 4},
    {PackedFormat::KV4_StaticTensor,      "kv4_static_tensor",     Role::Kv, 4, true,  quant::Granularity::PerTensor,     false, 4},
    {PackedFormat::KV8_StaticTensor_Asym, "kv8_static_tensor_asym", Role::Kv, 8, false, quant::Granularity::PerTensor,    false, 5},
    {PackedFormat::KV4_StaticTensor_Asym, "kv4_static_tensor_asym", Role::Kv, 4, false, quant::Granularity::PerTensor,    false, 5},
};

namespace detail {
constexpr const KvFormatTraits* find_kv(PackedFormat f) {
  for (const KvFormatTraits& t : kKvFormats)
    if (t.format == f) return &t;
  return nullptr;
}
constexpr bool kv_row_ok(const KvFormatTraits& t) {
  if (int(t.format) < 64 || int(t.format) > 95 || t.role != Role::Kv || find(t.format) != nullptr) return false;
  if (t.bits != 8 && t.bits != 4) return false;
  if (t.name.size() < 3 || t.name[0] != 'k' || t.name[1] != 'v' || t.name[2] != char('0' + t.bits)) return false;
  const quant::Granularity g = t.granularity;
  const bool dyn = g == quant::Granularity::PerHead || g == quant::Granularity::PerRow;
  const bool stat = g == quant::Granularity::PerHeadShared || g == quant::Granularity::PerTensor;
  if (!(dyn || stat) || t.dynamic != dyn) return false;
  return t.param_bytes == int(sizeof(float)) + (t.symmetric ? 0 : 1);
}
constexpr bool kv_table_ok() {
  for (size_t i = 0; i < std::size(kKvFormats); ++i) {
    if (!kv_row_ok(kKvFormats[i])) return false;
    for (size_t j = 0; j < i; ++j)
      if (kKvFormats[j].format == kKvFormats[i].format || kKvFormats[j].name == kKvFormats[i].name) return false;
  }
  // Values 64..79 are all taken, in the order of the table (bits, sym, granularity).
  for (size_t i = 0; i < std::size(kKvFormats); ++i)
    if (int(kKvFormats[i].format) != 64 + int(i)) return false;
  return true;
}
}  // namespace detail

static_assert(detail::kv_table_ok(), "kKvFormats: inconsistent row (see detail::kv_row_ok)");

// The traits row of a KV format; throws sinkq::Error for any other value.
const KvFormatTraits& kv_traits(PackedFormat f);
// By name ("kv4_per_head", ...); throws sinkq::Error listing the names.
PackedFormat parse_kv_format(std::string_view name);
// The KV format of (bits, symmetric, granularity); sinkq::Error saying what no format stores.
PackedFormat kv_format(int bits, bool symmetric, quant::Granularity g);
// The quantizer spec whose codes / params the format stores for rows of kv_heads·head_dim columns
// (head_dim set for the per-head granularities; clip_ratio as given, used only by calibration).
quant::QuantSpec kv_spec(PackedFormat f, int head_dim, float clip_ratio = 1.0f);
// Code bytes of one K (or V) row of kv_dim columns.
constexpr int64_t kv_row_bytes(const KvFormatTraits& t, int64_t kv_dim) { return kv_dim * t.bits / 8; }
// Scale (and zero) entries of one layer's K (or V) for `capacity` rows.
int64_t kv_param_count(const KvFormatTraits& t, int kv_heads, int64_t capacity);
// Bytes of a whole body cache (every layer, K and V): codes + scales + zeros.
int64_t kv_cache_bytes(PackedFormat f, int num_layers, int kv_heads, int head_dim, int64_t capacity);

}  // namespace sinkq::lowbit
