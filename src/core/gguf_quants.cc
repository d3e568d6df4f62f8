// sinkq/core/gguf_quants.cc — scalar reference dequantization of ggml block types.
//
// Each block type is a packed little-endian struct (the ggml layout, QK_K = 256); its byte layout
// is written above it and its size is static_asserted. A block is memcpy'd out of the source
// before decoding, so the source pointer needs no alignment (GGUF aligns tensor data to 32 bytes,
// but a caller may pass any pointer, e.g. one row into a tensor).
//
// Arithmetic: fp32, in the order ggml's dequantize_row_* and gguf-py's numpy code use:
//   Q4_0/Q5_0/Q8_0   d * q                  Q4_1/Q5_1   d * q + m
//   Q3_K/Q6_K        (d*sc) * q             Q2_K/Q4_K/Q5_K   (d*sc) * q - (dmin*mn)
// where d, m, dmin are f16 (widened exactly: 11 significant bits) and sc, mn, q small integers.
// Every product is exact in fp32: the integer factors add at most 13 significant bits (Q6_K:
// |sc| <= 128 -> 7 bits, |q - 32| <= 32 -> 5 bits; Q5_K: 6 + 5; Q4_K: 6 + 4; Q8_0: 7; the rest
// fewer), so 11 + 13 <= 24, and magnitudes stay far from fp32 overflow/underflow. Each result is
// thus an exact product, or one correctly rounded sum/difference of two exact products: it does
// not depend on association order or on FMA contraction, and equals gguf-py's and ggml's
// reference values bit for bit.
#include "core/gguf_quants.h"

#include <bit>
#include <cstddef>
#include <cstring>
#include <string_view>

#include "core/dtype.h"
#include "core/error.h"

namespace sinkq {
namespace {

static_assert(std::endian::native == std::endian::little,
              "the ggml block structs are read by memcpy: little-endian hosts only");

// ggml type ids (ggml.h `enum ggml_type`; the GGUF tensor-info `type` field). Plain constants so
// that this file does not depend on the GGUF reader's header.
namespace ggml {
constexpr uint32_t F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q2_K = 10,
                   Q3_K = 11, Q4_K = 12, Q5_K = 13, Q6_K = 14, BF16 = 30;
}  // namespace ggml

// The ggml name of a type id, for messages ("unknown" for ids ggml never assigned). Ids 4, 5,
// 31..33 and 36..38 are types ggml has since removed (the old Q4_2/Q4_3 and the repacked
// Q4_0_4_4.. / IQ4_NL_4_4.. variants).
std::string_view ggml_type_name(uint32_t t) {
  static constexpr std::string_view names[] = {
      "F32",        "F16",        "Q4_0",       "Q4_1",     "Q4_2",     "Q4_3",     "Q5_0",
      "Q5_1",       "Q8_0",       "Q8_1",       "Q2_K",     "Q3_K",     "Q4_K",     "Q5_K",
      "Q6_K",       "Q8_K",       "IQ2_XXS",    "IQ2_XS",   "IQ3_XXS",  "IQ1_S",    "IQ4_NL",
      "IQ3_S",      "IQ2_S",      "IQ4_XS",     "I8",       "I16",      "I32",      "I64",
      "F64",        "IQ1_M",      "BF16",       "Q4_0_4_4", "Q4_0_4_8", "Q4_0_8_8", "TQ1_0",
      "TQ2_0",      "IQ4_NL_4_4", "IQ4_NL_4_8", "IQ4_NL_8_8", "MXFP4",  "NVFP4",    "Q1_0"};
  return t < std::size(names) ? names[t] : std::string_view("unknown");
}

constexpr int QK_K = 256;  // elements per K-quant super-block

// ------------------------------------------------------------------------------ block layouts
// Sizes and offsets are in bytes; f16 fields are IEEE half, little-endian.

// Q4_0: 32 elements, 18 bytes. x[j] = d * (q[j] - 8), q in [0, 15].
//   [0, 2)   d   f16 scale
//   [2, 18)  qs  16 bytes: byte j holds q[j] in its low nibble and q[j + 16] in its high nibble
struct BlockQ4_0 {
  uint16_t d;
  uint8_t qs[16];
};
static_assert(sizeof(BlockQ4_0) == 2 + 16, "Q4_0 block is 18 bytes");

// Q4_1: 32 elements, 20 bytes. x[j] = d * q[j] + m, q in [0, 15].
//   [0, 2)   d   f16 scale
//   [2, 4)   m   f16 offset (the block minimum)
//   [4, 20)  qs  as Q4_0: low nibble of byte j -> q[j], high nibble -> q[j + 16]
struct BlockQ4_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qs[16];
};
static_assert(sizeof(BlockQ4_1) == 2 + 2 + 16, "Q4_1 block is 20 bytes");

// Q5_0: 32 elements, 22 bytes. x[j] = d * (q[j] - 16), q in [0, 31].
//   [0, 2)   d   f16 scale
//   [2, 6)   qh  u32 LE: bit j is bit 4 (the fifth bit) of q[j], j = 0..31
//   [6, 22)  qs  low 4 bits, as Q4_0: low nibble of byte j -> q[j], high nibble -> q[j + 16]
struct BlockQ5_0 {
  uint16_t d;
  uint8_t qh[4];
  uint8_t qs[16];
};
static_assert(sizeof(BlockQ5_0) == 2 + 4 + 16, "Q5_0 block is 22 bytes");

// Q5_1: 32 elements, 24 bytes. x[j] = d * q[j] + m, q in [0, 31].
//   [0, 2)   d   f16 scale
//   [2, 4)   m   f16 offset
//   [4, 8)   qh  u32 LE, bit j = bit 4 of q[j]
//   [8, 24)  qs  low 4 bits as Q5_0
struct BlockQ5_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qh[4];
  uint8_t qs[16];
};
static_assert(sizeof(BlockQ5_1) == 2 + 2 + 4 + 16, "Q5_1 block is 24 bytes");

// Q8_0: 32 elements, 34 bytes. x[j] = d * q[j].
//   [0, 2)   d   f16 scale
//   [2, 34)  qs  int8 q[j], j = 0..31
struct BlockQ8_0 {
  uint16_t d;
  int8_t qs[32];
};
static_assert(sizeof(BlockQ8_0) == 2 + 32, "Q8_0 block is 34 bytes");

// Q2_K: 256 elements in 16 sub-blocks of 16, 84 bytes. x[e] = (d*sc[s]) * q[e] - (dmin*mn[s]),
// s = e / 16, q in [0, 3].
//   [0, 16)   scales  byte s: low nibble sc[s] (4-bit scale), high nibble mn[s] (4-bit min)
//   [16, 80)  qs      2-bit quants. Element e = 128*h + 32*k + l (h = 0..1, k = 0..3,
//                     l = 0..31) is bits [2k, 2k+2) of byte qs[32*h + l]
//   [80, 82)  d       f16 super-block scale of the scales
//   [82, 84)  dmin    f16 super-block scale of the mins
struct BlockQ2_K {
  uint8_t scales[QK_K / 16];
  uint8_t qs[QK_K / 4];
  uint16_t d;
  uint16_t dmin;
};
static_assert(sizeof(BlockQ2_K) == QK_K / 16 + QK_K / 4 + 2 + 2, "Q2_K block is 84 bytes");

// Q3_K: 256 elements in 16 sub-blocks of 16, 110 bytes. x[e] = (d * (sc[s] - 32)) * q[e],
// s = e / 16, q in [-4, 3].
//   [0, 32)    hmask   high bit. Element e = 32*b + l (b = 0..7, l = 0..31) takes bit b of
//                      hmask[l]; q = low2 - 4 when that bit is 0, q = low2 when it is 1
//   [32, 96)   qs      low 2 bits (low2), packed as Q2_K's qs: e = 128*h + 32*k + l is bits
//                      [2k, 2k+2) of qs[32*h + l]
//   [96, 108)  scales  sixteen 6-bit unsigned scales sc[0..15] (stored with +32 bias):
//                      bits 0..3 of sc[s]: s < 8: low nibble of scales[s];
//                                          s >= 8: high nibble of scales[s - 8]
//                      bits 4..5 of sc[s]: bits [2*(s/4), 2*(s/4)+2) of scales[8 + s%4]
//   [108, 110) d       f16 super-block scale
struct BlockQ3_K {
  uint8_t hmask[QK_K / 8];
  uint8_t qs[QK_K / 4];
  uint8_t scales[12];
  uint16_t d;
};
static_assert(sizeof(BlockQ3_K) == QK_K / 8 + QK_K / 4 + 12 + 2, "Q3_K block is 110 bytes");

// Q4_K: 256 elements in 8 sub-blocks of 32, 144 bytes. x[e] = (d*sc[s]) * q[e] - (dmin*mn[s]),
// s = e / 32, q in [0, 15].
//   [0, 2)    d       f16 super-block scale of the scales
//   [2, 4)    dmin    f16 super-block scale of the mins
//   [4, 16)   scales  eight 6-bit scales sc[s] and eight 6-bit mins mn[s] ("k4" packing; the
//                     bytes called S[0..11] here):
//                     s < 4:  sc[s] = S[s] & 63            mn[s] = S[s + 4] & 63
//                     s >= 4: sc[s] = (S[s + 4] & 15) | ((S[s - 4] >> 6) << 4)
//                             mn[s] = (S[s + 4] >> 4) | ((S[s]     >> 6) << 4)
//                     i.e. S[0..3] / S[4..7] carry sc/mn 0..3 in their low 6 bits and the top
//                     2 bits of sc/mn 4..7 in their top 2 bits; S[8..11] the low nibbles of
//                     sc 4..7 (low half) and mn 4..7 (high half)
//   [16, 144) qs      4-bit quants. Element e = 64*c + 32*u + l (c = 0..3, u = 0..1, l = 0..31)
//                     is the low (u = 0) / high (u = 1) nibble of qs[32*c + l]
struct BlockQ4_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[12];
  uint8_t qs[QK_K / 2];
};
static_assert(sizeof(BlockQ4_K) == 2 + 2 + 12 + QK_K / 2, "Q4_K block is 144 bytes");

// Q5_K: 256 elements in 8 sub-blocks of 32, 176 bytes. x[e] = (d*sc[s]) * q[e] - (dmin*mn[s]),
// s = e / 32, q in [0, 31].
//   [0, 2)     d       f16
//   [2, 4)     dmin    f16
//   [4, 16)    scales  as Q4_K
//   [16, 48)   qh      bit 4 of q: element e = 32*s + l takes bit s of qh[l]
//   [48, 176)  qs      low 4 bits, packed as Q4_K's qs
struct BlockQ5_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[12];
  uint8_t qh[QK_K / 8];
  uint8_t qs[QK_K / 2];
};
static_assert(sizeof(BlockQ5_K) == 2 + 2 + 12 + QK_K / 8 + QK_K / 2, "Q5_K block is 176 bytes");

// Q6_K: 256 elements in 16 sub-blocks of 16, 210 bytes. x[e] = (d*sc[s]) * (q[e] - 32),
// s = e / 16, q in [0, 63].
//   [0, 128)    ql      low 4 bits. Element e = 128*h + 32*k + l (h = 0..1, k = 0..3,
//                       l = 0..31) is in byte ql[64*h + 32*(k&1) + l], low nibble for k < 2,
//                       high nibble for k >= 2
//   [128, 192)  qh      high 2 bits: bits [2k, 2k+2) of qh[32*h + l]
//   [192, 208)  scales  int8 sc[s]
//   [208, 210)  d       f16 super-block scale
struct BlockQ6_K {
  uint8_t ql[QK_K / 2];
  uint8_t qh[QK_K / 4];
  int8_t scales[QK_K / 16];
  uint16_t d;
};
static_assert(sizeof(BlockQ6_K) == QK_K / 2 + QK_K / 4 + QK_K / 16 + 2, "Q6_K block is 210 bytes");

// ------------------------------------------------------------------------------ block decoders
// Each writes its block's elements to y[0 .. block elements).

void decode(const BlockQ4_0& b, float* y) {
  const float d = f16_to_f32(b.d);
  for (int j = 0; j < 16; ++j) {
    y[j] = d * float(int(b.qs[j] & 15) - 8);
    y[j + 16] = d * float(int(b.qs[j] >> 4) - 8);
  }
}

void decode(const BlockQ4_1& b, float* y) {
  const float d = f16_to_f32(b.d), m = f16_to_f32(b.m);
  for (int j = 0; j < 16; ++j) {
    y[j] = d * float(b.qs[j] & 15) + m;
    y[j + 16] = d * float(b.qs[j] >> 4) + m;
  }
}

// Bit 4 of q[j] from a Q5 block's qh field.
uint32_t q5_high(const uint8_t (&qh)[4], int j) {
  uint32_t bits;
  std::memcpy(&bits, qh, 4);
  return ((bits >> j) & 1u) << 4;
}

void decode(const BlockQ5_0& b, float* y) {
  const float d = f16_to_f32(b.d);
  for (int j = 0; j < 16; ++j) {
    y[j] = d * float(int((b.qs[j] & 15u) | q5_high(b.qh, j)) - 16);
    y[j + 16] = d * float(int((b.qs[j] >> 4) | q5_high(b.qh, j + 16)) - 16);
  }
}

void decode(const BlockQ5_1& b, float* y) {
  const float d = f16_to_f32(b.d), m = f16_to_f32(b.m);
  for (int j = 0; j < 16; ++j) {
    y[j] = d * float((b.qs[j] & 15u) | q5_high(b.qh, j)) + m;
    y[j + 16] = d * float((b.qs[j] >> 4) | q5_high(b.qh, j + 16)) + m;
  }
}

void decode(const BlockQ8_0& b, float* y) {
  const float d = f16_to_f32(b.d);
  for (int j = 0; j < 32; ++j) y[j] = d * float(b.qs[j]);
}

void decode(const BlockQ2_K& b, float* y) {
  const float d = f16_to_f32(b.d), dmin = f16_to_f32(b.dmin);
  for (int e = 0; e < QK_K; ++e) {
    const int h = e / 128, k = (e % 128) / 32, l = e % 32, s = e / 16;
    const float dl = d * float(b.scales[s] & 15);
    const float ml = dmin * float(b.scales[s] >> 4);
    const int q = (b.qs[32 * h + l] >> (2 * k)) & 3;
    y[e] = dl * float(q) - ml;
  }
}

void decode(const BlockQ3_K& b, float* y) {
  const float d = f16_to_f32(b.d);
  int sc[16];
  gguf_q3k_scales(b.scales, sc);
  for (int e = 0; e < QK_K; ++e) {
    const int h = e / 128, k = (e % 128) / 32, l = e % 32;
    const float dl = d * float(sc[e / 16] - 32);
    const int low2 = (b.qs[32 * h + l] >> (2 * k)) & 3;
    const int hbit = (b.hmask[l] >> (e / 32)) & 1;
    y[e] = dl * float(low2 - (hbit ? 0 : 4));
  }
}

void decode(const BlockQ4_K& b, float* y) {
  const float d = f16_to_f32(b.d), dmin = f16_to_f32(b.dmin);
  for (int s = 0; s < 8; ++s) {
    int sc, mn;
    gguf_k4_scale_min(b.scales, s, sc, mn);
    const float dl = d * float(sc), ml = dmin * float(mn);
    const uint8_t* q = b.qs + 32 * (s / 2);
    const int shift = 4 * (s % 2);
    for (int l = 0; l < 32; ++l) y[32 * s + l] = dl * float((q[l] >> shift) & 15) - ml;
  }
}

void decode(const BlockQ5_K& b, float* y) {
  const float d = f16_to_f32(b.d), dmin = f16_to_f32(b.dmin);
  for (int s = 0; s < 8; ++s) {
    int sc, mn;
    gguf_k4_scale_min(b.scales, s, sc, mn);
    const float dl = d * float(sc), ml = dmin * float(mn);
    const uint8_t* q = b.qs + 32 * (s / 2);
    const int shift = 4 * (s % 2);
    for (int l = 0; l < 32; ++l) {
      const int v = ((q[l] >> shift) & 15) | (((b.qh[l] >> s) & 1) << 4);
      y[32 * s + l] = dl * float(v) - ml;
    }
  }
}

void decode(const BlockQ6_K& b, float* y) {
  const float d = f16_to_f32(b.d);
  for (int e = 0; e < QK_K; ++e) {
    const int h = e / 128, k = (e % 128) / 32, l = e % 32;
    const int low4 = (b.ql[64 * h + 32 * (k & 1) + l] >> (k < 2 ? 0 : 4)) & 15;
    const int high2 = (b.qh[32 * h + l] >> (2 * k)) & 3;
    const float dl = d * float(b.scales[e / 16]);
    y[e] = dl * float((low4 | (high2 << 4)) - 32);
  }
}

// Decodes the n / kElems packed blocks at src into dst[0, n).
template <class Block, int kElems>
void decode_blocks(const void* src, float* dst, int64_t n) {
  const auto* p = static_cast<const unsigned char*>(src);
  for (int64_t i = 0; i < n / kElems; ++i) {
    Block b;
    std::memcpy(&b, p + i * int64_t(sizeof(Block)), sizeof(Block));
    decode(b, dst + i * kElems);
  }
}

// F16 / BF16: element by element through memcpy (the source may be odd-aligned).
template <float (*widen)(uint16_t)>
void widen_halves(const void* src, float* dst, int64_t n) {
  const auto* p = static_cast<const unsigned char*>(src);
  for (int64_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, p + 2 * i, 2);
    dst[i] = widen(h);
  }
}

// Elements per block of a supported type, 0 for an unsupported one.
int block_elems(uint32_t type) {
  switch (type) {
    case ggml::F32:
    case ggml::F16:
    case ggml::BF16: return 1;
    case ggml::Q4_0:
    case ggml::Q4_1:
    case ggml::Q5_0:
    case ggml::Q5_1:
    case ggml::Q8_0: return 32;
    case ggml::Q2_K:
    case ggml::Q3_K:
    case ggml::Q4_K:
    case ggml::Q5_K:
    case ggml::Q6_K: return QK_K;
    default: return 0;
  }
}

}  // namespace

bool gguf_can_dequantize(uint32_t type) { return block_elems(type) != 0; }

void gguf_dequantize(uint32_t type, const void* src, float* dst, int64_t n, const std::string& what) {
  const int block = block_elems(type);
  SINKQ_CHECK(block != 0, "{}: ggml type {} ({}) cannot be dequantized (supported: F32, F16, BF16, "
              "Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K)",
              what, type, ggml_type_name(type));
  SINKQ_CHECK(n >= 0, "{}: negative element count {}", what, n);
  SINKQ_CHECK(n % block == 0,
              "{}: {} elements of ggml type {} is not a whole number of {}-element blocks", what, n,
              ggml_type_name(type), block);
  if (n == 0) return;
  SINKQ_ASSERT(src != nullptr && dst != nullptr);
  switch (type) {
    case ggml::F32: std::memcpy(dst, src, size_t(n) * sizeof(float)); return;
    case ggml::F16: widen_halves<f16_to_f32>(src, dst, n); return;
    case ggml::BF16: widen_halves<bf16_to_f32>(src, dst, n); return;
    case ggml::Q4_0: decode_blocks<BlockQ4_0, 32>(src, dst, n); return;
    case ggml::Q4_1: decode_blocks<BlockQ4_1, 32>(src, dst, n); return;
    case ggml::Q5_0: decode_blocks<BlockQ5_0, 32>(src, dst, n); return;
    case ggml::Q5_1: decode_blocks<BlockQ5_1, 32>(src, dst, n); return;
    case ggml::Q8_0: decode_blocks<BlockQ8_0, 32>(src, dst, n); return;
    case ggml::Q2_K: decode_blocks<BlockQ2_K, QK_K>(src, dst, n); return;
    case ggml::Q3_K: decode_blocks<BlockQ3_K, QK_K>(src, dst, n); return;
    case ggml::Q4_K: decode_blocks<BlockQ4_K, QK_K>(src, dst, n); return;
    case ggml::Q5_K: decode_blocks<BlockQ5_K, QK_K>(src, dst, n); return;
    case ggml::Q6_K: decode_blocks<BlockQ6_K, QK_K>(src, dst, n); return;
    default: SINKQ_ASSERT(false);
  }
}

}  // namespace sinkq
