// sinkq/lowbit/kv_avx2.cc — the AVX2 KvTable: 8 columns per ymm.
// 8-bit: vpmovsxbd of 8 codes; 4-bit: 4 bytes split into nibbles and interleaved back into column
// order (low nibble = even column) with punpcklbw, ^8, vpmovzxbd. Levels are formed in int32
// (minus the zero point) and converted exactly to fp32.
// Compiled with SINKQ_ISA_BEGIN (kernels/isa_region.h) after every include (see
// kernels/kernels_avx2.cc).
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "lowbit/codebook_kv.h"
#include "lowbit/kv_kernels.h"
#include "kernels/isa_region.h"

SINKQ_ISA_BEGIN("avx2,fma,f16c")

namespace sinkq::lowbit::detail::kv_avx2 {

struct VT {
  using V = __m256;
  using I = __m256i;
  static constexpr int W = 8;
  static V zero() { return _mm256_setzero_ps(); }
  static V set1(float a) { return _mm256_set1_ps(a); }
  static I iset1(int a) { return _mm256_set1_epi32(a); }
  static V load(const float* p) { return _mm256_loadu_ps(p); }
  static __m256i mask(int n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  }
  static V load_n(const float* p, int n) { return _mm256_maskload_ps(p, mask(n)); }
  static void store(float* p, V v) { _mm256_storeu_ps(p, v); }
  static void store_n(float* p, V v, int n) { _mm256_maskstore_ps(p, mask(n), v); }
  static V fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static V mul(V a, V b) { return _mm256_mul_ps(a, b); }
  static float hsum(V v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
  }
  // out[i] = hsum(a[i]) for i < 8 (one hadd tree: 9 shuffles/adds for 8 sums).
  static void hsum8(const V* a, float* out) {
    const __m256 h01 = _mm256_hadd_ps(a[0], a[1]), h23 = _mm256_hadd_ps(a[2], a[3]);
    const __m256 h45 = _mm256_hadd_ps(a[4], a[5]), h67 = _mm256_hadd_ps(a[6], a[7]);
    const __m256 h0123 = _mm256_hadd_ps(h01, h23), h4567 = _mm256_hadd_ps(h45, h67);
    // h0123 = [s0 s1 s2 s3 (low halves) | s0 s1 s2 s3 (high halves)], same for 4..7.
    const __m256 lo = _mm256_permute2f128_ps(h0123, h4567, 0x20), hi = _mm256_permute2f128_ps(h0123, h4567, 0x31);
    _mm256_storeu_ps(out, _mm256_add_ps(lo, hi));
  }
  static V lev8(const uint8_t* p, I zo) {
    const __m256i c = _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
    return _mm256_cvtepi32_ps(_mm256_sub_epi32(c, zo));
  }
  static V lev4(const uint8_t* p, I zo) {
    int32_t w;
    std::memcpy(&w, p, 4);
    const __m128i b = _mm_cvtsi32_si128(w), m = _mm_set1_epi8(0x0F);
    const __m128i lo = _mm_and_si128(b, m), hi = _mm_and_si128(_mm_srli_epi16(b, 4), m);
    const __m128i x = _mm_xor_si128(_mm_unpacklo_epi8(lo, hi), _mm_set1_epi8(8));  // c + 8, in column order
    return _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_cvtepu8_epi32(x), zo));
  }
  // Codebook indices (cb_simd.inc): the level table, and W levels of B-bit indices starting at p
  // (one 32-bit load, broadcast, shifted by lane·B, masked, looked up with vpermps; 16 levels: two
  // lookups blended on the index's bit 3). Reads 4 bytes.
  static V add(V a, V b) { return _mm256_add_ps(a, b); }
  static V sub(V a, V b) { return _mm256_sub_ps(a, b); }
  struct Tab {
    __m256 lo, hi;
  };
  static Tab tab(const float* levels16) { return {_mm256_loadu_ps(levels16), _mm256_loadu_ps(levels16 + 8)}; }
  template <int B>
  static V lev(const uint8_t* p, const Tab& t) {
    int32_t w;
    std::memcpy(&w, p, 4);
    const __m256i sh = _mm256_setr_epi32(0, B, 2 * B, 3 * B, 4 * B, 5 * B, 6 * B, 7 * B);
    const __m256i idx = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(w), sh), _mm256_set1_epi32((1 << B) - 1));
    if constexpr (B == 4)
      return _mm256_blendv_ps(_mm256_permutevar8x32_ps(t.lo, idx), _mm256_permutevar8x32_ps(t.hi, idx),
                              _mm256_castsi256_ps(_mm256_slli_epi32(idx, 28)));
    else
      return _mm256_permutevar8x32_ps(t.lo, idx);
  }
};

}  // namespace sinkq::lowbit::detail::kv_avx2

#define SINKQ_KVNS kv_avx2
#include "lowbit/kv_simd.inc"
#include "lowbit/cb_simd.inc"
#undef SINKQ_KVNS

namespace sinkq::lowbit::detail {
const KvTable& kv_table_avx2() {
  static const KvTable t{kv_avx2::scores, kv_avx2::weighted_sum};
  return t;
}
const CbTable& cb_table_avx2() {
  static const CbTable t{kv_avx2::cb_scores, kv_avx2::cb_weighted_sum};
  return t;
}
}  // namespace sinkq::lowbit::detail

SINKQ_ISA_END
