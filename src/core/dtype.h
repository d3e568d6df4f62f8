// sinkq/core/dtype.h — element types of tensors as stored on disk / in memory.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

namespace sinkq {

// Values are fixed: they may be written into artifacts.
enum class DType : uint8_t { F32 = 0, F16 = 1, BF16 = 2 };

constexpr size_t dtype_size(DType t) { return t == DType::F32 ? 4 : 2; }
std::string_view dtype_name(DType t);  // "F32" | "F16" | "BF16" (safetensors spelling)
std::optional<DType> parse_dtype(std::string_view safetensors_name);

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

// Widen n elements of type t at src into dst (fp32).
void to_f32(DType t, const void* src, float* dst, size_t n);

}  // namespace sinkq
