// sinkq/lowbit/kv_avx512.cc — the AVX-512 (F+BW) KvTable: 16 columns per zmm.
// 8-bit: vpmovsxbd of 16 codes; 4-bit: 8 bytes split into nibbles, interleaved back into column
// order (punpcklbw), ^8, vpmovzxbd. Levels in int32 minus the zero point, converted exactly.
// Compiled with SINKQ_ISA_BEGIN (kernels/isa_region.h) after every include (see
// kernels/kernels_avx2.cc).
#include <immintrin.h>

#include <cstdint>

#include <cstring>

#include "lowbit/codebook_kv.h"
#include "lowbit/kv_kernels.h"
#include "kernels/isa_region.h"

SINKQ_ISA_BEGIN("avx512f,avx512bw,avx512vl,avx2,fma,f16c")
// GCC 12 false positive (bug 105593): the AVX-512 intrinsics use _mm*_undefined_*() internally.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace sinkq::lowbit::detail::kv_avx512 {

struct VT {
  using V = __m512;
  using I = __m512i;
  static constexpr int W = 16;
  static V zero() { return _mm512_setzero_ps(); }
  static V set1(float a) { return _mm512_set1_ps(a); }
  static I iset1(int a) { return _mm512_set1_epi32(a); }
  static V load(const float* p) { return _mm512_loadu_ps(p); }
  static __mmask16 mask(int n) { return __mmask16((1u << n) - 1u); }
  static V load_n(const float* p, int n) { return _mm512_maskz_loadu_ps(mask(n), p); }
  static void store(float* p, V v) { _mm512_storeu_ps(p, v); }
  static void store_n(float* p, V v, int n) { _mm512_mask_storeu_ps(p, mask(n), v); }
  static V fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static V mul(V a, V b) { return _mm512_mul_ps(a, b); }
  static float hsum(V v) {
    const __m256 h = _mm256_add_ps(_mm512_castps512_ps256(v), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
  }
  // out[i] = hsum(a[i]) for i < 8: each folded to 8 lanes, then the AVX2 hadd tree.
  static void hsum8(const V* a, float* out) {
    __m256 f[8];
    for (int i = 0; i < 8; ++i)
      f[i] = _mm256_add_ps(_mm512_castps512_ps256(a[i]), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a[i]), 1)));
    const __m256 h01 = _mm256_hadd_ps(f[0], f[1]), h23 = _mm256_hadd_ps(f[2], f[3]);
    const __m256 h45 = _mm256_hadd_ps(f[4], f[5]), h67 = _mm256_hadd_ps(f[6], f[7]);
    const __m256 h0123 = _mm256_hadd_ps(h01, h23), h4567 = _mm256_hadd_ps(h45, h67);
    const __m256 lo = _mm256_permute2f128_ps(h0123, h4567, 0x20), hi = _mm256_permute2f128_ps(h0123, h4567, 0x31);
    _mm256_storeu_ps(out, _mm256_add_ps(lo, hi));
  }
  static V lev8(const uint8_t* p, I zo) {
    const __m512i c = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm512_cvtepi32_ps(_mm512_sub_epi32(c, zo));
  }
  static V lev4(const uint8_t* p, I zo) {
    const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)), m = _mm_set1_epi8(0x0F);
    const __m128i lo = _mm_and_si128(b, m), hi = _mm_and_si128(_mm_srli_epi16(b, 4), m);
    const __m128i x = _mm_xor_si128(_mm_unpacklo_epi8(lo, hi), _mm_set1_epi8(8));  // c + 8, in column order
    return _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_cvtepu8_epi32(x), zo));
  }
  // Codebook indices (cb_simd.inc): 16 B-bit indices from two 32-bit loads (lanes 8..15 start at
  // byte B), broadcast per 256-bit half, shifted by (lane mod 8)·B, masked, one vpermps over the
  // 16 levels. Reads B + 4 bytes.
  static V add(V a, V b) { return _mm512_add_ps(a, b); }
  static V sub(V a, V b) { return _mm512_sub_ps(a, b); }
  struct Tab {
    __m512 v;
  };
  static Tab tab(const float* levels16) { return {_mm512_loadu_ps(levels16)}; }
  template <int B>
  static V lev(const uint8_t* p, const Tab& t) {
    int32_t a, b;
    std::memcpy(&a, p, 4);
    std::memcpy(&b, p + B, 4);
    const __m512i w = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi32(a)), _mm256_set1_epi32(b), 1);
    const __m512i sh = _mm512_setr_epi32(0, B, 2 * B, 3 * B, 4 * B, 5 * B, 6 * B, 7 * B, 0, B, 2 * B, 3 * B, 4 * B,
                                         5 * B, 6 * B, 7 * B);
    const __m512i idx = _mm512_and_si512(_mm512_srlv_epi32(w, sh), _mm512_set1_epi32((1 << B) - 1));
    return _mm512_permutexvar_ps(idx, t.v);
  }
};

}  // namespace sinkq::lowbit::detail::kv_avx512

#define SINKQ_KVNS kv_avx512
#include "lowbit/kv_simd.inc"
#include "lowbit/cb_simd.inc"
#undef SINKQ_KVNS

namespace sinkq::lowbit::detail {
const KvTable& kv_table_avx512() {
  static const KvTable t{kv_avx512::scores, kv_avx512::weighted_sum};
  return t;
}
const CbTable& cb_table_avx512() {
  static const CbTable t{kv_avx512::cb_scores, kv_avx512::cb_weighted_sum};
  return t;
}
}  // namespace sinkq::lowbit::detail

#pragma GCC diagnostic pop
SINKQ_ISA_END
