// sinkq/formats/packed_format.h — the packed low-bit formats as plain data: the pieces a format is
// composed of, the PackedFormat values, the format tables and the codebook function rows.
//
// A plain-data header: only <cstdint> / <cstddef>, no std containers or strings, no exceptions,
// so C++ and CUDA translation units both include it (tested: tests/formats/plain_header_test.cc).
// The C++ API over it (PackedTensor, traits(), parse_format, pack, quantize, the KV cache) is
// lowbit/formats.h and lowbit/kv_kernels.h.
//
// A format is composed of pieces:
//   codebook     how a stored code maps to a level: Codebook::UniformInt (the grid of
//                uniform_int.h). KVQuant's nuqX KV body (a per-layer level table, b = 2..4-bit
//                index streams, fp16 outliers in a CSR by token) is not a row of these tables: its
//                parameters are per-layer codecs (formats/nuq.h, calibrated by quant/kvquant.h,
//                stored as the artifact's kv_codebook.* tensors), its layout and kernels are
//                lowbit/codebook_kv.h.
//   bits         8 or 4 (codes per byte: 1 or 2)
//   symmetric    x̂ = s·q, or x̂ = s·(q - z) with a uint8 zero point per scale
//   granularity  which elements share a (scale, zero) (granularity.h); `group` columns per scale
//                for PerGroup
//   scale source Dynamic (params from the data of each call / stored row) or Static (params
//                computed once, offline or by calibration, and stored with the tensor)
//   sparse       outliers kept apart from the codes: Sparse::None now
// Each codebook has its function rows (pack, unpack, dequantize, dot: kCodebookRows) with the
// scalar reference beside them (uniform_int.h); the lowbit SIMD kernels are tested against those.
//
// PackedFormat values are fixed and explicit: artifacts store them (runtime/artifact_*.cc), so a
// value is never renumbered or reused; weights 1..31, activations 32..63, KV cache bodies 64..95.
// The weight / activation rows are listed (their pairings and group sizes are choices, not a
// product); the 16 KV rows are generated from their pieces, value = 64 + index over
// scale source × scope (head / row) × symmetry × bits, and their names are composed the same way.
//
// Byte layout of a weight / activation tensor X[rows, cols] (little-endian, planar: three
// separate arrays, rows contiguous; weights [out, in] as HF nn.Linear, activations [tokens,
// features]):
//   codes   [rows, row_bytes(bits, cols)] uint8, packed rows as uniform_int.h: 8-bit one int8 code
//           per byte; 4-bit two per byte, low nibble = even column, an odd row's last high nibble 0.
//   scales  [rows, groups] fp32 (weights per row / per group; activations per token), or [1]
//           (per-tensor activations). fp32, not fp16: an fp16 scale would change x̂ = s·q and the
//           packed tensor would no longer reproduce the simulator's fake_quant values exactly.
//   zeros   [rows, groups] uint8 zero points z in [0, 2^N - 1]; asymmetric formats only.
//   groups = cols / group for per-group formats, 1 otherwise.
// Only symmetric activations: x̂ = s·c keeps the integer GEMM free of activation zero points.
// SIMD-friendly interleaving is not a file format: lowbit/kernels.h repacks at load time.
// The KV cache layout is written at kKvFormats below.
#pragma once

#include <cstddef>
#include <cstdint>

#include "formats/device.h"
#include "formats/granularity.h"
#include "formats/uniform_int.h"

namespace sinkq::formats {

using quant::Granularity;

// ---- the pieces -----------------------------------------------------------------------------

// How a stored code becomes a level (the codebook KV body's lookup tables: lowbit/codebook_kv.h).
enum class Codebook : uint8_t { UniformInt };
// Where the scale / zero point come from (see quantizer.h "Static vs dynamic").
enum class ScaleSource : uint8_t { Dynamic, Static };
// Outliers stored apart from the codes: none in these formats (KVQuant's dense-and-sparse KV
// outliers: lowbit/codebook_kv.h).
enum class Sparse : uint8_t { None };
enum class Role : uint8_t { Weight, Activation, Kv };

// Values are fixed (artifacts); weights 1..31, activations 32..63, KV cache bodies 64..95.
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
  // KV cache bodies: 64 + kv_index(bits, symmetric, scope, source), generated in kKvFormats.
  // "head" = one of the kv_heads slices of a row.
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

// One format, composed of its pieces. The one-byte fields come first so the row is 24 bytes on
// every LP64 host and on the device (a table may be copied to device memory as bytes).
struct FormatDesc {
  PackedFormat format;
  Role role;
  Codebook codebook;
  bool symmetric;
  Granularity granularity;  // weights: PerRow (output channel) / PerGroup; activations: PerRow
                            // (token) / PerTensor; KV: PerHead, PerRow (token), PerHeadShared,
                            // PerTensor
  ScaleSource source;
  Sparse sparse;
  PackedFormat paired;      // weights: the activation format of the canonical pairing (W8A8,
                            // W4A8); activations and KV: itself. The kernels accept any
                            // activation format with any weight format.
  int bits;                 // 8 or 4
  int group;                // columns per scale for PerGroup; 0: the whole row / tensor / head
  const char* name;         // snake_case, for flags, messages and artifacts

  SINKQ_HD constexpr bool dynamic() const { return source == ScaleSource::Dynamic; }
  // Bytes of one parameter entry: fp32 scale (+ uint8 zero point).
  SINKQ_HD constexpr int param_bytes() const { return int(sizeof(float)) + (symmetric ? 0 : 1); }
  // Code bytes of one group (group·bits/8); 0 when group == 0.
  SINKQ_HD constexpr int group_code_bytes() const { return group * bits / 8; }
};

// ---- weights and activations: listed rows ---------------------------------------------------

namespace detail {
// Weights: params computed offline and stored (static), paired with per-token int8 activations.
constexpr FormatDesc weight(PackedFormat f, const char* name, int bits, bool symmetric, int group) {
  FormatDesc d{};
  d.format = f;
  d.role = Role::Weight;
  d.codebook = Codebook::UniformInt;
  d.symmetric = symmetric;
  d.granularity = group > 0 ? Granularity::PerGroup : Granularity::PerRow;
  d.source = ScaleSource::Static;
  d.sparse = Sparse::None;
  d.paired = PackedFormat::A8_PerToken;
  d.bits = bits;
  d.group = group;
  d.name = name;
  return d;
}
// Activations: symmetric; per token dynamic, per tensor static (calibrated).
constexpr FormatDesc activation(PackedFormat f, const char* name, int bits, Granularity g) {
  FormatDesc d{};
  d.format = f;
  d.role = Role::Activation;
  d.codebook = Codebook::UniformInt;
  d.symmetric = true;
  d.granularity = g;
  d.source = g == Granularity::PerRow ? ScaleSource::Dynamic : ScaleSource::Static;
  d.sparse = Sparse::None;
  d.paired = f;
  d.bits = bits;
  d.group = 0;
  d.name = name;
  return d;
}
}  // namespace detail

inline constexpr FormatDesc kFormats[] = {
    //               format                      name            bits sym    group
    detail::weight(PackedFormat::W8_PerRow,    "w8_per_row",    8, true,  0),
    detail::weight(PackedFormat::W4_PerRow,    "w4_per_row",    4, true,  0),
    detail::weight(PackedFormat::W4_G32,       "w4_g32",        4, true,  32),
    detail::weight(PackedFormat::W4_G64,       "w4_g64",        4, true,  64),
    detail::weight(PackedFormat::W4_G128,      "w4_g128",       4, true,  128),
    detail::weight(PackedFormat::W4_G32_Asym,  "w4_g32_asym",   4, false, 32),
    detail::weight(PackedFormat::W4_G64_Asym,  "w4_g64_asym",   4, false, 64),
    detail::weight(PackedFormat::W4_G128_Asym, "w4_g128_asym",  4, false, 128),
    //                   format                      name             bits granularity
    detail::activation(PackedFormat::A8_PerToken,  "a8_per_token",  8, Granularity::PerRow),
    detail::activation(PackedFormat::A8_PerTensor, "a8_per_tensor", 8, Granularity::PerTensor),
    detail::activation(PackedFormat::A4_PerToken,  "a4_per_token",  4, Granularity::PerRow),
    detail::activation(PackedFormat::A4_PerTensor, "a4_per_tensor", 4, Granularity::PerTensor),
};

// ---- KV cache bodies: rows generated from the pieces ----------------------------------------
//
// The quantized body of a KV cache (the fp32 prefix in front of it is never quantized). One
// format covers K and V of every layer; K is stored after RoPE (site k), V as projected (site v).
// Byte layout of one layer's K (V alike) for a body of `capacity` rows, H = kv_heads, D = head_dim
// (little-endian, planar: three arrays, rows contiguous, row r = body position r):
//   codes   [capacity, H, D·bits/8] uint8: stored codes c packed as above (low nibble = even
//           column). 4-bit needs an even D (RoPE models always have one), so every head starts
//           on a byte boundary.
//   scales  fp32: per_head [capacity, H]; per_token [capacity]; static_head [H]; static_tensor [1]
//   zeros   uint8 z in [0, 2^N - 1], same shape as scales (asymmetric formats only)
// x̂ = s·(c + code_offset - z) = s·level, level an exact small integer.
//
// The pieces: scope = what one scale covers within a row (a head, or the whole row) × source.
// A static scale is shared by every row, so (Row, Static) is one scale per tensor.
enum class KvScope : uint8_t { Head, Row };

inline constexpr ScaleSource kKvSources[] = {ScaleSource::Dynamic, ScaleSource::Static};
inline constexpr KvScope kKvScopes[] = {KvScope::Head, KvScope::Row};
inline constexpr bool kKvSymmetry[] = {true, false};
inline constexpr int kKvBits[] = {8, 4};
inline constexpr int kKvFirst = 64;  // value of the first KV format
inline constexpr int kKvCount = 16;  // = the product of the four axes above

SINKQ_HD constexpr Granularity kv_granularity(KvScope scope, ScaleSource source) {
  if (source == ScaleSource::Dynamic) return scope == KvScope::Head ? Granularity::PerHead : Granularity::PerRow;
  return scope == KvScope::Head ? Granularity::PerHeadShared : Granularity::PerTensor;
}
// Index of a KV format in kKvFormats (value - kKvFirst): source, scope, symmetry, bits, the
// last varying fastest, each in the order of its axis above. -1 for bits other than 8 / 4.
SINKQ_HD constexpr int kv_index(int bits, bool symmetric, KvScope scope, ScaleSource source) {
  if (bits != 8 && bits != 4) return -1;
  return ((int(source) * 2 + int(scope)) * 2 + (symmetric ? 0 : 1)) * 2 + (bits == 8 ? 0 : 1);
}
SINKQ_HD constexpr PackedFormat kv_value(int bits, bool symmetric, KvScope scope, ScaleSource source) {
  return PackedFormat(kKvFirst + kv_index(bits, symmetric, scope, source));
}

namespace detail {
inline constexpr int kNameCap = 24;
struct KvNames {
  char s[kKvCount][kNameCap];
};
constexpr void append(char* dst, int& n, const char* src) {
  while (*src != '\0') dst[n++] = *src++;
  dst[n] = '\0';
}
// "kv" bits "_" ("per" | "static") "_" ("head" | "token" | "tensor") ["_asym"], e.g.
// kv4_per_head, kv8_static_tensor_asym. The row word of a static format is "tensor" (see above).
constexpr KvNames make_kv_names() {
  KvNames out{};
  for (ScaleSource src : kKvSources)
    for (KvScope scope : kKvScopes)
      for (bool sym : kKvSymmetry)
        for (int bits : kKvBits) {
          char* d = out.s[kv_index(bits, sym, scope, src)];
          int n = 0;
          const char digit[] = {char('0' + bits), '\0'};
          append(d, n, "kv");
          append(d, n, digit);
          append(d, n, src == ScaleSource::Dynamic ? "_per_" : "_static_");
          append(d, n, scope == KvScope::Head ? "head" : src == ScaleSource::Dynamic ? "token" : "tensor");
          if (!sym) append(d, n, "_asym");
        }
  return out;
}
inline constexpr KvNames kKvNames = make_kv_names();

struct KvTable {
  FormatDesc row[kKvCount];
};
constexpr KvTable make_kv_table() {
  KvTable out{};
  for (ScaleSource src : kKvSources)
    for (KvScope scope : kKvScopes)
      for (bool sym : kKvSymmetry)
        for (int bits : kKvBits) {
          const int i = kv_index(bits, sym, scope, src);
          FormatDesc& d = out.row[i];
          d.format = PackedFormat(kKvFirst + i);
          d.role = Role::Kv;
          d.codebook = Codebook::UniformInt;
          d.symmetric = sym;
          d.granularity = kv_granularity(scope, src);
          d.source = src;
          d.sparse = Sparse::None;
          d.paired = d.format;
          d.bits = bits;
          d.group = 0;
          d.name = kKvNames.s[i];
        }
  return out;
}
inline constexpr KvTable kKvTable = make_kv_table();
}  // namespace detail

// kKvFormats[i].format == PackedFormat(64 + i).
inline constexpr const FormatDesc (&kKvFormats)[kKvCount] = detail::kKvTable.row;

// ---- lookups --------------------------------------------------------------------------------

// The row of a weight / activation format; nullptr for any other value.
constexpr const FormatDesc* find_format(PackedFormat f) {
  for (const FormatDesc& t : kFormats)
    if (t.format == f) return &t;
  return nullptr;
}
// The row of a KV format; nullptr for any other value.
constexpr const FormatDesc* find_kv_format(PackedFormat f) {
  const int i = int(f) - kKvFirst;
  return i >= 0 && i < kKvCount ? &kKvFormats[i] : nullptr;
}

// ---- codebook function rows -----------------------------------------------------------------
//
// One row per Codebook: the scalar reference of packing, unpacking, dequantizing and dotting one
// packed row (or a byte-aligned span of one). The lowbit pack / dequantize paths call these, once
// per row or group; the SIMD kernels never go through this table per element. Host-side function
// pointers: device code calls the SINKQ_HD functions of uniform_int.h directly (a switch on the
// codebook), as a CUDA kernel cannot call through a host pointer.
// zc = z - code_offset of the span (0 symmetric); level = c - zc, x̂ = s·level. A Lut codebook will
// take its table of levels in place of (zc, s).
struct CodebookRows {
  Codebook codebook;
  const char* name;
  void (*pack)(const int8_t* codes, int64_t n, int bits, uint8_t* dst);
  void (*unpack)(const uint8_t* src, int64_t n, int bits, int8_t* codes);
  void (*dequantize)(const uint8_t* src, int64_t n, int bits, int zc, float s, float* out);
  int32_t (*dot_i8)(const uint8_t* src, int64_t n, int bits, const int8_t* y);       // Σ c·y
  float (*dot_f32)(const uint8_t* src, int64_t n, int bits, int zc, const float* y);  // Σ y·level
};

inline constexpr CodebookRows kCodebookRows[] = {
    {Codebook::UniformInt, "uniform_int", uniform::pack_row, uniform::unpack_row, uniform::dequantize_row,
     uniform::dot_i8, uniform::dot_f32},
};

constexpr const CodebookRows& codebook_rows(Codebook c) { return kCodebookRows[size_t(c)]; }

// ---- compile-time checks --------------------------------------------------------------------

namespace detail {
constexpr bool str_eq(const char* a, const char* b) {
  while (*a != '\0' && *a == *b) ++a, ++b;
  return *a == *b;
}

// The pieces every format shares: one codebook row per codebook, no sparse part yet, 8 / 4 bits.
constexpr bool pieces_ok(const FormatDesc& t) {
  return t.codebook == Codebook::UniformInt && codebook_rows(t.codebook).codebook == t.codebook &&
         t.sparse == Sparse::None && (t.bits == 8 || t.bits == 4) && t.name != nullptr;
}

// Every row of kFormats is self-consistent.
constexpr bool row_ok(const FormatDesc& t) {
  const bool weight = t.role == Role::Weight;
  if (t.role == Role::Kv || !pieces_ok(t)) return false;
  if (int(t.format) < 1 || int(t.format) > 63 || weight != (int(t.format) < 32)) return false;
  if (t.name[0] != (weight ? 'w' : 'a') || t.name[1] != char('0' + t.bits)) return false;
  const bool grouped = t.granularity == Granularity::PerGroup;
  // Groups hold whole bytes and whole 8-column kernel steps; 8-bit formats are per row only.
  if (grouped != (t.group > 0) || (grouped && (t.group % 32 != 0 || t.bits != 4))) return false;
  if (weight) {
    if (t.granularity != Granularity::PerRow && !grouped) return false;
    if (t.source != ScaleSource::Static) return false;
  } else {
    if (!t.symmetric || (t.granularity != Granularity::PerRow && t.granularity != Granularity::PerTensor))
      return false;
    if (t.dynamic() != (t.granularity == Granularity::PerRow)) return false;
  }
  const FormatDesc* p = find_format(t.paired);
  return p != nullptr && p->role == Role::Activation && (weight || p->format == t.format);
}

constexpr bool table_ok() {
  for (size_t i = 0; i < sizeof(kFormats) / sizeof(kFormats[0]); ++i) {
    if (!row_ok(kFormats[i])) return false;
    for (size_t j = 0; j < i; ++j)
      if (kFormats[j].format == kFormats[i].format || str_eq(kFormats[j].name, kFormats[i].name)) return false;
  }
  return true;
}

// Every generated KV row: value 64 + its index, the names "kv<bits>_...", dynamic exactly for
// the per-row granularities, no value shared with kFormats, unique names.
constexpr bool kv_row_ok(const FormatDesc& t, int i) {
  if (int(t.format) != kKvFirst + i || int(t.format) > 95 || t.role != Role::Kv || !pieces_ok(t)) return false;
  if (find_format(t.format) != nullptr || t.group != 0 || t.paired != t.format) return false;
  if (t.name[0] != 'k' || t.name[1] != 'v' || t.name[2] != char('0' + t.bits)) return false;
  const Granularity g = t.granularity;
  const bool dyn = g == Granularity::PerHead || g == Granularity::PerRow;
  const bool stat = g == Granularity::PerHeadShared || g == Granularity::PerTensor;
  return (dyn || stat) && t.dynamic() == dyn;
}
constexpr bool kv_table_ok() {
  for (int i = 0; i < kKvCount; ++i) {
    if (!kv_row_ok(kKvFormats[i], i)) return false;
    for (int j = 0; j < i; ++j)
      if (str_eq(kKvFormats[j].name, kKvFormats[i].name)) return false;
  }
  return true;
}
}  // namespace detail

// (Not under GCC's AddressSanitizer, which makes a global's address compared with nullptr a
// non-constant expression; every other build checks the tables.)
#if !defined(__SANITIZE_ADDRESS__)
static_assert(detail::table_ok(), "kFormats: inconsistent row (see detail::row_ok)");
static_assert(detail::kv_table_ok(), "kKvFormats: inconsistent row (see detail::kv_row_ok)");
#endif
static_assert(sizeof(kKvSources) * sizeof(kKvScopes) * sizeof(kKvSymmetry) * (sizeof(kKvBits) / sizeof(int)) ==
              size_t(kKvCount));

// The enumerators name their pieces (values 64..79 as before the table was generated).
static_assert(kv_value(8, true, KvScope::Head, ScaleSource::Dynamic) == PackedFormat::KV8_PerHead);
static_assert(kv_value(4, false, KvScope::Head, ScaleSource::Dynamic) == PackedFormat::KV4_PerHead_Asym);
static_assert(kv_value(8, true, KvScope::Row, ScaleSource::Dynamic) == PackedFormat::KV8_PerToken);
static_assert(kv_value(4, false, KvScope::Row, ScaleSource::Dynamic) == PackedFormat::KV4_PerToken_Asym);
static_assert(kv_value(8, true, KvScope::Head, ScaleSource::Static) == PackedFormat::KV8_StaticHead);
static_assert(kv_value(4, false, KvScope::Head, ScaleSource::Static) == PackedFormat::KV4_StaticHead_Asym);
static_assert(kv_value(8, true, KvScope::Row, ScaleSource::Static) == PackedFormat::KV8_StaticTensor);
static_assert(kv_value(4, false, KvScope::Row, ScaleSource::Static) == PackedFormat::KV4_StaticTensor_Asym);
static_assert(detail::str_eq(find_kv_format(PackedFormat::KV4_PerToken_Asym)->name, "kv4_per_token_asym") &&
              detail::str_eq(find_kv_format(PackedFormat::KV8_StaticTensor)->name, "kv8_static_tensor"));

// Byte sizes: the scalar types of the layout, the plain structs, and the sizes the layout implies.
static_assert(sizeof(float) == 4 && sizeof(PackedFormat) == 1 && sizeof(Granularity) == 1);
static_assert(sizeof(Codebook) == 1 && sizeof(ScaleSource) == 1 && sizeof(Sparse) == 1 && sizeof(Role) == 1);
static_assert(sizeof(void*) != 8 || sizeof(FormatDesc) == 24, "FormatDesc: 8 one-byte fields, 2 ints, 1 pointer");
static_assert(find_format(PackedFormat::W4_G32)->group_code_bytes() == 16 &&
              find_format(PackedFormat::W4_G128_Asym)->group_code_bytes() == 64 &&
              find_format(PackedFormat::W8_PerRow)->group_code_bytes() == 0);
static_assert(find_format(PackedFormat::W4_G128)->param_bytes() == 4 &&
              find_format(PackedFormat::W4_G32_Asym)->param_bytes() == 5 &&
              find_kv_format(PackedFormat::KV8_StaticHead_Asym)->param_bytes() == 5 &&
              find_kv_format(PackedFormat::KV4_PerHead)->param_bytes() == 4);

}  // namespace sinkq::formats
