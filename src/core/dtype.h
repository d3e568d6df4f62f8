// sinkq/core/dtype.h — element types of tensors as stored on disk / in memory.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

namespace sinkq {

// Values are fixed: F32 / F16 / BF16 may be written into artifacts.
// The block types are ggml's (0x80 + the ggml type id): a GGUF model's weights held as the file
// stores them (io/gguf_model.cc, SINKQ_GGUF_WEIGHTS) and widened where they are used, exactly as
// at load (core/gguf_quants.h). They are never written into an artifact and never parsed from one.
enum class DType : uint8_t {
  F32 = 0, F16 = 1, BF16 = 2,
  Q4_0 = 0x82, Q4_1 = 0x83, Q5_0 = 0x86, Q5_1 = 0x87, Q8_0 = 0x88,
  Q2_K = 0x8a, Q3_K = 0x8b, Q4_K = 0x8c, Q5_K = 0x8d, Q6_K = 0x8e,
};

constexpr bool dtype_is_block(DType t) { return uint8_t(t) >= 0x80; }
// Bytes per element of an element type (F32 / F16 / BF16). A block type has no per-element size:
// use dtype_row_bytes.
constexpr size_t dtype_size(DType t) { return t == DType::F32 ? 4 : 2; }
// Elements per block (1 for F32 / F16 / BF16; 32 for Q4_0..Q8_0; 256 for the K-quants) and bytes.
int64_t dtype_block_elems(DType t);
size_t dtype_block_bytes(DType t);
// Bytes of n consecutive elements (a row), n a multiple of the block (asserted).
size_t dtype_row_bytes(DType t, int64_t n);
// The DType of a ggml type id that sinkq holds without widening (F32, F16, BF16 and the block
// types gguf_dequantize reads); nullopt otherwise.
std::optional<DType> dtype_of_ggml(uint32_t ggml_type);
std::string_view dtype_name(DType t);  // "F32" | "F16" | "BF16" (safetensors spelling) | "Q4_K" …
std::optional<DType> parse_dtype(std::string_view safetensors_name);  // F32 / F16 / BF16 only

// bf16 is the top half of an IEEE f32: widening is exact.
inline float bf16_to_f32(uint16_t h) { return std::bit_cast<float>(uint32_t(h) << 16); }
// Round to nearest even; NaN stays NaN (quiet bit forced).
inline uint16_t f32_to_bf16(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}
// IEEE half -> float, exact for every input (subnormals, inf, NaN).
float f16_to_f32(uint16_t h);
// float -> IEEE half, round to nearest even, overflow to inf.
uint16_t f32_to_f16(float f);

// Widen n elements of type t at src into dst (fp32); for a block type n is a multiple of its block
// and the values are gguf_dequantize's, bit for bit.
void to_f32(DType t, const void* src, float* dst, size_t n);

}  // namespace sinkq
