// sinkq/kernels/kernels_avx2.cc — the AVX2 (+FMA, F16C) KernelTable: 8-lane fp32 vectors.
//
// Compiled with SINKQ_ISA_BEGIN (kernels/isa_region.h) placed after every include, so only the
// code below uses AVX2; the binary still runs on older CPUs as long as this table is not selected.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "core/dtype.h"
#include "core/error.h"
#include "core/gguf_quants.h"
#include "kernels/kernel_table.h"
#include "kernels/isa_region.h"

SINKQ_ISA_BEGIN("avx2,fma,f16c")

namespace sinkq::detail::avx2 {

struct VT {
  using V = __m256;
  static constexpr int W = 8;
  static constexpr int kChains = 2;
  // 3 rows x 2 tokens x 2 chains = 12 accumulators + 3 weight vectors + x of 16 ymm registers.
  static constexpr int kTileRows = 3, kMaxTokens = 2;
  static constexpr int64_t kGemvMaxT = 16;
  static V zero() { return _mm256_setzero_ps(); }
  static V set1(float a) { return _mm256_set1_ps(a); }
  static V load(const float* p) { return _mm256_loadu_ps(p); }
  static __m256i mask(int n) {  // lanes [0, n) set
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  }
  static V load_n(const float* p, int n) { return _mm256_maskload_ps(p, mask(n)); }
  static void store(float* p, V v) { _mm256_storeu_ps(p, v); }
  static void store_n(float* p, V v, int n) { _mm256_maskstore_ps(p, mask(n), v); }
  // bf16 -> f32: zero-extend to 32 bits and shift into the high half (exact).
  static V bf16_bits(__m128i h) { return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16)); }
  static __m128i load8_n(const uint16_t* p, int n) {  // no masked 16-bit loads in AVX2
    alignas(16) uint16_t b[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    std::memcpy(b, p, size_t(n) * 2);
    return _mm_load_si128(reinterpret_cast<const __m128i*>(b));
  }
  static V bf16(const uint16_t* p) { return bf16_bits(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
  static V bf16_n(const uint16_t* p, int n) { return bf16_bits(load8_n(p, n)); }
  static V f16(const uint16_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
  static V f16_n(const uint16_t* p, int n) { return _mm256_cvtph_ps(load8_n(p, n)); }
  // 8 unsigned / signed bytes widened to floats (exact).
  static V u8(const uint8_t* p) {
    return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
  }
  static V i8(const int8_t* p) {
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
  }
  static V fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static V add(V a, V b) { return _mm256_add_ps(a, b); }
  static V sub(V a, V b) { return _mm256_sub_ps(a, b); }
  static V mul(V a, V b) { return _mm256_mul_ps(a, b); }
  static V div(V a, V b) { return _mm256_div_ps(a, b); }
  static V max(V a, V b) { return _mm256_max_ps(a, b); }
  static float hsum(V v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
  }
  static float hmax(V v) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
  }
  // One Walsh-Hadamard butterfly stage inside the vector, pairs (i, i + H) for H < W:
  // lane i gets v[i] + v[i+H] if bit H of i is clear, else v[i-H] - v[i] (the same operands in
  // the same order as the scalar a + b, a - b; sw holds the partner lanes).
  template <int H> static V bfly(V v) {
    static_assert(H == 1 || H == 2 || H == 4);
    V sw;
    if constexpr (H == 1) sw = _mm256_permute_ps(v, 0xB1);
    else if constexpr (H == 2) sw = _mm256_permute_ps(v, 0x4E);
    else sw = _mm256_permute2f128_ps(v, v, 0x01);
    constexpr int hi = H == 1 ? 0xAA : H == 2 ? 0xCC : 0xF0;  // lanes with bit H set
    return _mm256_blend_ps(_mm256_add_ps(v, sw), _mm256_sub_ps(sw, v), hi);
  }
  // exp(x): n = round(x log2 e), r = x - n ln2 (two-constant split, |r| <= ln2/2), degree-7
  // Taylor polynomial (truncation < 6e-9 relative), times 2^n built in the exponent field.
  // About 2-3 ulp. x < -87.33 (result below FLT_MIN) gives 0; x > 88 is clamped (1.65e38);
  // NaN propagates (max/min return their second operand on NaN).
  static V exp(V x) {
    const V lo = _mm256_set1_ps(-87.33f);
    const V under = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
    x = _mm256_min_ps(_mm256_set1_ps(88.0f), _mm256_max_ps(lo, x));
    const V n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504f)),
                                _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    V r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    V p = _mm256_set1_ps(1.0f / 5040);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_andnot_ps(under, _mm256_mul_ps(p, _mm256_castsi256_ps(e)));
  }
};

}  // namespace sinkq::detail::avx2

#define SINKQ_KNS avx2
#define SINKQ_DEQUANT_SIMD
#define SINKQ_KTABLE kernels_avx2
#include "kernels/simd_kernels.inc"

SINKQ_ISA_END
