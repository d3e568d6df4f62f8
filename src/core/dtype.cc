#include "core/dtype.h"

#include <string>

#include "core/error.h"
#include "core/gguf_quants.h"

namespace sinkq {

namespace {
struct BlockType {
  DType t;
  const char* name;
  int64_t elems;
  size_t bytes;
};
// The ggml block layouts (core/gguf_quants.cc has each struct and its static_assert'ed size).
constexpr BlockType kBlockTypes[] = {
    {DType::Q4_0, "Q4_0", 32, 18},   {DType::Q4_1, "Q4_1", 32, 20},   {DType::Q5_0, "Q5_0", 32, 22},
    {DType::Q5_1, "Q5_1", 32, 24},   {DType::Q8_0, "Q8_0", 32, 34},   {DType::Q2_K, "Q2_K", 256, 84},
    {DType::Q3_K, "Q3_K", 256, 110}, {DType::Q4_K, "Q4_K", 256, 144}, {DType::Q5_K, "Q5_K", 256, 176},
    {DType::Q6_K, "Q6_K", 256, 210},
};
const BlockType* block_type(DType t) {
  for (const BlockType& b : kBlockTypes)
    if (b.t == t) return &b;
  return nullptr;
}
}  // namespace

int64_t dtype_block_elems(DType t) { return dtype_is_block(t) ? block_type(t)->elems : 1; }
size_t dtype_block_bytes(DType t) { return dtype_is_block(t) ? block_type(t)->bytes : dtype_size(t); }

size_t dtype_row_bytes(DType t, int64_t n) {
  const int64_t be = dtype_block_elems(t);
  SINKQ_ASSERT(n >= 0 && n % be == 0);
  return size_t(n / be) * dtype_block_bytes(t);
}

std::optional<DType> dtype_of_ggml(uint32_t ggml_type) {
  if (ggml_type == 0) return DType::F32;
  if (ggml_type == 1) return DType::F16;
  if (ggml_type == 30) return DType::BF16;
  for (const BlockType& b : kBlockTypes)
    if (uint32_t(b.t) - 0x80u == ggml_type) return b.t;
  return std::nullopt;
}

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "F32";
    case DType::F16: return "F16";
    case DType::BF16: return "BF16";
    default: break;
  }
  const BlockType* b = block_type(t);
  return b ? b->name : "?";
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
  if (dtype_is_block(t)) return gguf_dequantize(uint32_t(t) - 0x80u, src, dst, int64_t(n), "a weight row");
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
    default: SINKQ_ASSERT(false);
  }
}

}  // namespace sinkq
