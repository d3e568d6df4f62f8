#include "core/dtype.h"

namespace sinkq {

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "F32";
    case DType::F16: return "F16";
    case DType::BF16: return "BF16";
  }
  return "?";
}

std::optional<DType> parse_dtype(std::string_view s) {
  if (s == "F32") return DType::F32;
  if (s == "F16") return DType::F16;
  if (s == "BF16") return DType::BF16;
  return std::nullopt;
}

float f16_to_f32(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t man = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (man == 0) {
      bits = sign;
    } else {  // subnormal: renormalise
      exp = 127 - 15 + 1;
      while (!(man & 0x400u)) {
        man <<= 1;
        --exp;
      }
      man &= 0x3ffu;
      bits = sign | (exp << 23) | (man << 13);
    }
  } else if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (man << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (man << 13);
  }
  return std::bit_cast<float>(bits);
}

uint16_t f32_to_f16(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  const uint16_t sign = uint16_t((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return sign | 0x7e00u;  // NaN
  if (a >= 0x477ff000u) return sign | 0x7c00u; // rounds to >= 65520: inf
  if (a < 0x38800000u) {                       // below the smallest normal half: subnormal
    const float af = std::bit_cast<float>(a);
    // half subnormal step is 2^-24; nearbyint in default mode is round-half-even.
    const float scaled = af * 16777216.0f;     // exact (power of two)
    uint32_t q = uint32_t(scaled);
    const float rem = scaled - float(q);
    if (rem > 0.5f || (rem == 0.5f && (q & 1u))) ++q;
    return sign | uint16_t(q);
  }
  uint32_t r = a + 0xfffu + ((a >> 13) & 1u) - ((127 - 15) << 23);
  return sign | uint16_t(r >> 13);
}

void to_f32(DType t, const void* src, float* dst, size_t n) {
  switch (t) {
    case DType::F32:
      std::memcpy(dst, src, n * 4);
      return;
    case DType::BF16: {
      const auto* s = static_cast<const uint16_t*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(s[i]);
      return;
    }
    case DType::F16: {
      const auto* s = static_cast<const uint16_t*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = f16_to_f32(s[i]);
      return;
    }
  }
}

}  // namespace sinkq
