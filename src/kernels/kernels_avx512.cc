// sinkq/kernels/kernels_avx512.cc — the AVX-512 (F+BW+VL) KernelTable: 16-lane fp32 vectors,
// masked loads/stores for every tail (bf16/f16 tails via 16-bit masked loads, hence BW+VL).
//
// Compiled with SINKQ_ISA_BEGIN (kernels/isa_region.h) after every include (see kernels_avx2.cc).
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "core/dtype.h"
#include "core/error.h"
#include "core/gguf_quants.h"
#include "kernels/kernel_table.h"
#include "kernels/isa_region.h"

SINKQ_ISA_BEGIN("avx512f,avx512bw,avx512vl,avx2,fma,f16c")
// GCC 12 false positive (bug 105593): _mm512_reduce_*_ps use _mm256_undefined_pd() internally.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace sinkq::detail::avx512 {

struct VT {
  using V = __m512;
  static constexpr int W = 16;
  static constexpr int kChains = 2;
  // 6 rows x 2 tokens x 2 chains = 24 accumulators + 6 weight vectors + x of 32 zmm registers.
  static constexpr int kTileRows = 6, kMaxTokens = 2;
  static constexpr int64_t kGemvMaxT = 64;
  static __mmask16 mask(int n) { return __mmask16((1u << n) - 1u); }
  static V zero() { return _mm512_setzero_ps(); }
  static V set1(float a) { return _mm512_set1_ps(a); }
  static V load(const float* p) { return _mm512_loadu_ps(p); }
  static V load_n(const float* p, int n) { return _mm512_maskz_loadu_ps(mask(n), p); }
  static void store(float* p, V v) { _mm512_storeu_ps(p, v); }
  static void store_n(float* p, V v, int n) { _mm512_mask_storeu_ps(p, mask(n), v); }
  // bf16 -> f32: zero-extend to 32 bits and shift into the high half (exact).
  static V bf16_bits(__m256i h) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)); }
  static V bf16(const uint16_t* p) { return bf16_bits(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }
  static V bf16_n(const uint16_t* p, int n) { return bf16_bits(_mm256_maskz_loadu_epi16(mask(n), p)); }
  static V f16(const uint16_t* p) { return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }
  static V f16_n(const uint16_t* p, int n) { return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mask(n), p)); }
  // 16 unsigned / signed bytes widened to floats (exact).
  static V u8(const uint8_t* p) {
    return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
  }
  static V i8(const int8_t* p) {
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
  }
  static V fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static V add(V a, V b) { return _mm512_add_ps(a, b); }
  static V sub(V a, V b) { return _mm512_sub_ps(a, b); }
  static V mul(V a, V b) { return _mm512_mul_ps(a, b); }
  static V div(V a, V b) { return _mm512_div_ps(a, b); }
  static V max(V a, V b) { return _mm512_max_ps(a, b); }
  static float hsum(V v) { return _mm512_reduce_add_ps(v); }
  static float hmax(V v) { return _mm512_reduce_max_ps(v); }
  // One in-vector butterfly stage, H < W (see kernels_avx2.cc).
  template <int H> static V bfly(V v) {
    static_assert(H == 1 || H == 2 || H == 4 || H == 8);
    V sw;
    if constexpr (H == 1) sw = _mm512_permute_ps(v, 0xB1);
    else if constexpr (H == 2) sw = _mm512_permute_ps(v, 0x4E);
    else if constexpr (H == 4) sw = _mm512_shuffle_f32x4(v, v, 0xB1);
    else sw = _mm512_shuffle_f32x4(v, v, 0x4E);
    constexpr __mmask16 hi = H == 1 ? 0xAAAA : H == 2 ? 0xCCCC : H == 4 ? 0xF0F0 : 0xFF00;
    return _mm512_mask_sub_ps(_mm512_add_ps(v, sw), hi, sw, v);
  }
  // exp(x): as in kernels_avx2.cc, but 2^n is applied with scalef, which also produces the
  // subnormal range correctly; x is clamped to [-104, 88.7] (exp(-104) rounds to 0).
  static V exp(V x) {
    x = _mm512_min_ps(_mm512_set1_ps(88.7f), _mm512_max_ps(_mm512_set1_ps(-104.0f), x));
    const V n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    V r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    V p = _mm512_set1_ps(1.0f / 5040);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, n);
  }
};

}  // namespace sinkq::detail::avx512

#define SINKQ_KNS avx512
#define SINKQ_DEQUANT_SIMD
#define SINKQ_KTABLE kernels_avx512
#include "kernels/simd_kernels.inc"

#pragma GCC diagnostic pop
SINKQ_ISA_END
