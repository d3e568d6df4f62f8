// sinkq/formats/uniform_int.h — the uniform-integer codebook: its scalar reference rows (encode,
// decode, nibble pack / unpack, dot) as plain functions that C++ and CUDA both compile.
//
// This is the one definition of the integer grid of quantizer.h, reduced to single elements and
// single rows; quant::quantize_to_int / dequantize and the lowbit pack / dequantize paths call it,
// and the lowbit SIMD kernels are tested against it (they do not call it per element).
//
// Grid (N = bits, 2..8; docs/quant.md): level l = q - z is an exact small integer and x̂ = s·l.
//   symmetric   q in [-2^(N-1), 2^(N-1)-1], z = 0
//   asymmetric  q in [0, 2^N - 1],           z in [0, 2^N - 1]
// Stored code c = q - code_offset (0 symmetric, 2^(N-1) asymmetric), so the codes of every mode are
// int8 in [-2^(N-1), 2^(N-1)-1] and l = c - zc with zc = z - code_offset.
// Packed rows: 8-bit one int8 code per byte (two's complement); 4-bit two codes per byte, the low
// nibble holds the even column 2j, the high nibble column 2j+1 (the low 4 bits of the int8 code);
// a row starts on a byte boundary and an odd row's last high nibble is 0.
//
// Only <cstdint> / <cstddef>: no exceptions, no allocation, nothing that a device cannot run.
#pragma once

#include <cstddef>
#include <cstdint>

#include "formats/device.h"

namespace sinkq::formats::uniform {

// ---- the grid -------------------------------------------------------------------------------

// Range of q (the integer before the offset), as quant::qmin / qmax.
SINKQ_HD constexpr int qmin(int bits, bool symmetric) { return symmetric ? -(1 << (bits - 1)) : 0; }
SINKQ_HD constexpr int qmax(int bits, bool symmetric) {
  return symmetric ? (1 << (bits - 1)) - 1 : (1 << bits) - 1;
}
// Subtracted from q before it is stored (quant::code_offset).
SINKQ_HD constexpr int code_offset(int bits, bool symmetric) { return symmetric ? 0 : (1 << (bits - 1)); }
// Range of the stored code c, every mode.
SINKQ_HD constexpr int code_min(int bits) { return -(1 << (bits - 1)); }
SINKQ_HD constexpr int code_max(int bits) { return (1 << (bits - 1)) - 1; }

// Round half to even for |v| <= 2^22, in the default FE_TONEAREST mode: adding 1.5·2^23 moves v
// into [2^23, 2^24) where the fp32 spacing is exactly 1, so the addition itself rounds v to an
// integer with ties to even; subtracting is then exact. Same result as std::nearbyint (tested),
// but branch-free and vectorizable; it must not be compiled with -ffast-math (reassociation).
SINKQ_HD constexpr float rne_small(float v) {
  constexpr float kMagic = 12582912.0f;  // 1.5 * 2^23
  return (v + kMagic) - kMagic;
}

// One element: clamp(rne(x / s) + z, qlo, qhi) - z with the clamp done before rounding on integer
// bounds lo = qlo - z, hi = qhi - z (identical result: rne is monotone and the bounds are
// integers; it keeps |v| small for rne_small and maps NaN to the lowest code). x / s is a true
// fp32 division. Returns the signed level l = q - z: x̂ = s · l.
SINKQ_HD constexpr float level(float x, float s, float lo, float hi) {
  float v = x / s;
  v = v > lo ? v : lo;  // NaN compares false -> lo (same as fmax, but maps to one maxps)
  v = v < hi ? v : hi;
  return rne_small(v);
}

// The stored code c of x under scale s (>= FLT_MIN) and zero point z (0 when symmetric).
SINKQ_HD constexpr int encode(float x, float s, int z, int bits, bool symmetric) {
  const float zf = float(z);
  const float l = level(x, s, float(qmin(bits, symmetric)) - zf, float(qmax(bits, symmetric)) - zf);
  return int(l + zf - float(code_offset(bits, symmetric)));  // small exact integers in fp32
}

// x̂ of stored code c, zc = z - code_offset: float(l)·s with l = c - zc (exact), one rounding.
SINKQ_HD constexpr float decode(int c, int zc, float s) { return float(c - zc) * s; }

// ---- packed rows ----------------------------------------------------------------------------

// One nibble pair: the low nibble holds the even column. Codes in [-8, 7].
SINKQ_HD constexpr uint8_t pack_nibbles(int even, int odd) { return uint8_t((even & 0xF) | ((odd & 0xF) << 4)); }
SINKQ_HD constexpr int8_t nibble_code(uint8_t byte, bool high) {
  return int8_t((((high ? byte >> 4 : byte) & 0xF) ^ 8) - 8);  // sign-extend 4 bits
}

// Bytes of a packed row of n codes (4-bit: rounded up to a whole byte).
SINKQ_HD constexpr int64_t row_bytes(int bits, int64_t n) { return bits == 8 ? n : (n + 1) / 2; }

// The stored code of column j of a packed row.
SINKQ_HD constexpr int code_at(const uint8_t* row, int64_t j, int bits) {
  return bits == 8 ? int(int8_t(row[j])) : int(nibble_code(row[j / 2], (j & 1) != 0));
}

// codes[n] (each in [code_min, code_max]) -> dst[row_bytes(bits, n)].
SINKQ_HD constexpr void pack_row(const int8_t* codes, int64_t n, int bits, uint8_t* dst) {
  if (bits == 8) {
    for (int64_t j = 0; j < n; ++j) dst[j] = uint8_t(codes[j]);
  } else {
    for (int64_t j = 0; j < n; j += 2) dst[j / 2] = pack_nibbles(codes[j], j + 1 < n ? codes[j + 1] : 0);
  }
}

// src[row_bytes(bits, n)] -> codes[n].
SINKQ_HD constexpr void unpack_row(const uint8_t* src, int64_t n, int bits, int8_t* codes) {
  for (int64_t j = 0; j < n; ++j) codes[j] = int8_t(code_at(src, j, bits));
}

// x̂[n] of a packed span sharing one (s, zc); the span starts on a byte boundary.
SINKQ_HD constexpr void dequantize_row(const uint8_t* src, int64_t n, int bits, int zc, float s, float* out) {
  for (int64_t j = 0; j < n; ++j) out[j] = decode(code_at(src, j, bits), zc, s);
}

// Σ_j c_j·y_j in int32 (exact for n < 2^17 at 8 bits: |c·y| <= 2^14).
SINKQ_HD constexpr int32_t dot_i8(const uint8_t* src, int64_t n, int bits, const int8_t* y) {
  int32_t acc = 0;
  for (int64_t j = 0; j < n; ++j) acc += int32_t(code_at(src, j, bits)) * int32_t(y[j]);
  return acc;
}

// Σ_j y_j·l_j in fp32, in column order, l_j = c_j - zc: the dequantized dot is s times this (the
// order of the scalar KV kernel, lowbit/kv_scalar.cc).
SINKQ_HD constexpr float dot_f32(const uint8_t* src, int64_t n, int bits, int zc, const float* y) {
  float acc = 0.0f;
  for (int64_t j = 0; j < n; ++j) acc += y[j] * float(code_at(src, j, bits) - zc);
  return acc;
}

// ---- compile-time checks of the layout ------------------------------------------------------

static_assert(pack_nibbles(-1, 2) == 0x2F && pack_nibbles(-8, 7) == 0x78);
static_assert(nibble_code(0x78, false) == -8 && nibble_code(0x78, true) == 7 && nibble_code(0x2F, false) == -1);
static_assert(row_bytes(4, 7) == 4 && row_bytes(8, 7) == 7);
static_assert(code_min(4) == -8 && code_max(8) == 127 && code_offset(4, false) == 8);
static_assert(encode(-3.0f, 1.0f, 0, 4, true) == -3 && encode(100.0f, 1.0f, 0, 4, true) == 7);
static_assert(encode(2.5f, 1.0f, 3, 4, false) == 2 + 3 - 8);  // rne(2.5) = 2 (ties to even)
static_assert(decode(-3, 0, 0.5f) == -1.5f && decode(5, 3 - 8, 2.0f) == 20.0f);

}  // namespace sinkq::formats::uniform
