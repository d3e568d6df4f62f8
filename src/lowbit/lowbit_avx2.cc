// sinkq/lowbit/lowbit_avx2.cc — the AVX2 LowbitTable: a 16-row block is two 256-bit halves.
//
// 4-bit weights: vpmaddubsw (u8 weight nibble x s8 activation, pairs <= 2·15·128: never
// saturates), then vpmaddwd by ones into the eight int32 row lanes. 8-bit weights (u = c + 128 up
// to 255 could saturate vpmaddubsw): the signed codes c = u ^ 0x80 through vpmaddubsw(|x|,
// sign(c, x)), then vpmaddwd by ones the same way (the -128 codes: kernels.h, gemm_kernels.inc),
// 1.9x the zero-extended vpmaddwd kernel, which remains for blocks with many -128 codes.
// Compiled with SINKQ_ISA_BEGIN (kernels/isa_region.h) after every include (see
// kernels/kernels_avx2.cc).
#include <immintrin.h>

#include <cstdint>

#include "formats/quantizer.h"
#include "lowbit/formats.h"
#include "lowbit/table.h"
#include "kernels/isa_region.h"

SINKQ_ISA_BEGIN("avx2,fma,f16c")

namespace sinkq::lowbit::detail::avx2 {

struct VT {
  // GEMV: one block at a time, one stream (2 blocks at once were 1.7-2.6x slower from DRAM); one
  // accumulator suffices (vpaddd, one cycle).
  static constexpr int kGemvBlocks = 1, kGemvChains = 1, kGemmBlocks = 1;
  static constexpr int kTokens8 = 2, kTokens4 = 4, kTokens4G = 2, kTokens8s = 4;
  static constexpr bool kSigned8 = true;
  static constexpr double kSigned8Fix = 1.0;  // -128 codes per step of 64 a signed block may hold
  struct I16 {
    __m256i a, b;  // rows 0-7, 8-15
  };
  struct F16 {
    __m256 a, b;
  };
  // Offset 8-bit (blocks with many -128 codes): zero-extended u against the sign-extended x
  // quadruple by vpmaddwd; two int32 partials per row, folded by vphaddd at the end of a group.
  struct Acc8 {
    __m256i p[4];  // rows 4i..4i+3: [r (cols 0,1), r (cols 2,3)] x 4 rows
  };
  struct W8 {
    __m256i q[4];  // rows 4i..4i+3 x 4 columns, zero-extended to int16
  };
  static Acc8 zero8() { return {{_mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256()}}; }
  static W8 load8(const uint8_t* p) {
    W8 w;
    for (int i = 0; i < 4; ++i) w.q[i] = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16 * i)));
    return w;
  }
  static void dot8(Acc8& a, const W8& w, int32_t x4) {
    const __m256i xv = _mm256_cvtepi8_epi16(_mm_set1_epi32(x4));  // [x0 x1 x2 x3] x 4
    for (int i = 0; i < 4; ++i) a.p[i] = _mm256_add_epi32(a.p[i], _mm256_madd_epi16(w.q[i], xv));
  }
  static __m256i fold(__m256i p, __m256i q) {  // [r0 r1 r4 r5 | r2 r3 r6 r7] -> r0..r7
    return _mm256_permute4x64_epi64(_mm256_hadd_epi32(p, q), 0xD8);
  }
  static I16 fin(const Acc8& a) { return {fold(a.p[0], a.p[1]), fold(a.p[2], a.p[3])}; }
  struct Acc4 {
    __m256i a[2];
  };
  struct W4 {
    __m256i lo[2], hi[2];  // columns 0-3 / 4-7 of rows 0-7 and 8-15
  };
  static Acc4 zero4() { return {{_mm256_setzero_si256(), _mm256_setzero_si256()}}; }
  static W4 load4(const uint8_t* p) {
    const __m256i m = _mm256_set1_epi8(0x0F);
    W4 w;
    for (int h = 0; h < 2; ++h) {
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32 * h));
      w.lo[h] = _mm256_and_si256(v, m);
      w.hi[h] = _mm256_and_si256(_mm256_srli_epi16(v, 4), m);
    }
    return w;
  }
  static void dot4(Acc4& a, const W4& w, int32_t xlo, int32_t xhi) {
    const __m256i xl = _mm256_set1_epi32(xlo), xh = _mm256_set1_epi32(xhi), ones = _mm256_set1_epi16(1);
    for (int h = 0; h < 2; ++h) {
      const __m256i s = _mm256_add_epi16(_mm256_maddubs_epi16(w.lo[h], xl), _mm256_maddubs_epi16(w.hi[h], xh));
      a.a[h] = _mm256_add_epi32(a.a[h], _mm256_madd_epi16(s, ones));
    }
  }
  static I16 fin(const Acc4& a) { return {a.a[0], a.a[1]}; }
  // Signed 8-bit: vpmaddubsw(|x|, sign(c, x)) = the pair sums of c·x (in [-32768, 32512]: never
  // saturates; sign(-128, x < 0) wraps to -128, corrected by the tile), then vpmaddwd by ones
  // into the row lanes as for 4-bit. One 32-byte load per 8 rows, no widening.
  using Acc8s = Acc4;
  struct W8s {
    __m256i c[2];  // rows 0-7, 8-15: the signed codes c = u ^ 0x80
  };
  static Acc8s zero8s() { return zero4(); }
  static W8s load8s(const uint8_t* p) {
    const __m256i f = _mm256_set1_epi8(char(0x80));
    return {{_mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)), f),
             _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32)), f)}};
  }
  static void dot8s(Acc8s& a, const W8s& w, int32_t x4) {
    const __m256i xb = _mm256_set1_epi32(x4), ax = _mm256_abs_epi8(xb), ones = _mm256_set1_epi16(1);
    for (int h = 0; h < 2; ++h)
      a.a[h] = _mm256_add_epi32(a.a[h], _mm256_madd_epi16(_mm256_maddubs_epi16(ax, _mm256_sign_epi8(w.c[h], xb)), ones));
  }
  static I16 sub_scalar(const I16& i, int32_t c) {
    const __m256i v = _mm256_set1_epi32(c);
    return {_mm256_sub_epi32(i.a, v), _mm256_sub_epi32(i.b, v)};
  }
  static I16 sub_mul(const I16& i, const int32_t* z, int32_t c) {
    const __m256i v = _mm256_set1_epi32(c);
    const __m256i za = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(z));
    const __m256i zb = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(z + 8));
    return {_mm256_sub_epi32(i.a, _mm256_mullo_epi32(za, v)), _mm256_sub_epi32(i.b, _mm256_mullo_epi32(zb, v))};
  }
  static F16 cvt(const I16& i) { return {_mm256_cvtepi32_ps(i.a), _mm256_cvtepi32_ps(i.b)}; }
  static F16 load(const float* p) { return {_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8)}; }
  static __m256i mask(int n) {  // lanes [0, n) set; n may be <= 0 or >= 8
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  }
  static F16 load_n(const float* p, int n) { return {_mm256_maskload_ps(p, mask(n)), _mm256_maskload_ps(p + 8, mask(n - 8))}; }
  static F16 set1(float s) { return {_mm256_set1_ps(s), _mm256_set1_ps(s)}; }
  static F16 zero() { return {_mm256_setzero_ps(), _mm256_setzero_ps()}; }
  static F16 mul(const F16& x, const F16& y) { return {_mm256_mul_ps(x.a, y.a), _mm256_mul_ps(x.b, y.b)}; }
  static F16 add(const F16& x, const F16& y) { return {_mm256_add_ps(x.a, y.a), _mm256_add_ps(x.b, y.b)}; }
  static void store_n(float* p, const F16& v, int n) {
    if (n == 16) {
      _mm256_storeu_ps(p, v.a);
      _mm256_storeu_ps(p + 8, v.b);
      return;
    }
    _mm256_maskstore_ps(p, mask(n), v.a);
    _mm256_maskstore_ps(p + 8, mask(n - 8), v.b);
  }
};

uint32_t absmax_bits(const float* x, int64_t n) {
  const __m256i m = _mm256_set1_epi32(0x7fffffff);
  __m256i acc = _mm256_setzero_si256();
  int64_t k = 0;
  __m256i a1 = acc, a2 = acc, a3 = acc;  // independent chains
  auto ld = [&](int64_t j) { return _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + j)), m); };
  for (; k + 32 <= n; k += 32) {
    acc = _mm256_max_epu32(acc, ld(k));
    a1 = _mm256_max_epu32(a1, ld(k + 8));
    a2 = _mm256_max_epu32(a2, ld(k + 16));
    a3 = _mm256_max_epu32(a3, ld(k + 24));
  }
  for (; k + 8 <= n; k += 8) acc = _mm256_max_epu32(acc, ld(k));
  acc = _mm256_max_epu32(_mm256_max_epu32(acc, a1), _mm256_max_epu32(a2, a3));
  __m128i r = _mm_max_epu32(_mm256_castsi256_si128(acc), _mm256_extracti128_si256(acc, 1));
  r = _mm_max_epu32(r, _mm_shuffle_epi32(r, 0x4E));
  r = _mm_max_epu32(r, _mm_shuffle_epi32(r, 0xB1));
  uint32_t best = uint32_t(_mm_cvtsi128_si32(r));
  for (; k < n; ++k) {
    uint32_t b;
    __builtin_memcpy(&b, x + k, 4);
    b &= 0x7fffffffu;
    best = b > best ? b : best;
  }
  return best;
}

// quant::detail::level on 8 lanes: maxps/minps return their second operand on NaN, exactly the
// `v > lo ? v : lo` of the scalar definition; cvtps rounds half to even (default MXCSR, asserted
// by kernels.cc).
inline __m256i level8(const float* p, __m256 s, __m256 lo, __m256 hi) {
  const __m256 v = _mm256_min_ps(_mm256_max_ps(_mm256_div_ps(_mm256_loadu_ps(p), s), lo), hi);
  return _mm256_cvtps_epi32(v);
}

// The same by the reciprocal (table.h recip_ok / kTieMargin); `near` collects the lanes close to
// a rounding boundary, whose group the caller recomputes with level8.
inline __m256i level8_recip(const float* p, __m256 r, __m256 lo, __m256 hi, __m256& near) {
  const __m256 v = _mm256_min_ps(_mm256_max_ps(_mm256_mul_ps(_mm256_loadu_ps(p), r), lo), hi);
  const __m256i c = _mm256_cvtps_epi32(v);
  const __m256 d = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), _mm256_sub_ps(v, _mm256_cvtepi32_ps(c)));
  near = _mm256_or_ps(near, _mm256_cmp_ps(d, _mm256_set1_ps(0.5f - kTieMargin), _CMP_GE_OQ));
  return c;
}

void quantize_row(const float* x, int64_t n, float s, int bits, uint8_t* q, const float* next) {
  const float flo = float(-(1 << (bits - 1))), fhi = float((1 << (bits - 1)) - 1);
  const __m256 vs = _mm256_set1_ps(s), lo = _mm256_set1_ps(flo), hi = _mm256_set1_ps(fhi);
  const bool fast = recip_ok(s);
  const __m256 vr = _mm256_set1_ps(fast ? 1.0f / s : 0.0f);
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  int64_t k = 0;
  for (; k + 32 <= n; k += 32) {
    if (next) {
      _mm_prefetch(reinterpret_cast<const char*>(next + k), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(next + k + 16), _MM_HINT_T0);
    }
    __m256i l0, l1, l2, l3;
    bool divide = !fast;
    if (fast) {
      __m256 near = _mm256_setzero_ps();
      l0 = level8_recip(x + k, vr, lo, hi, near);
      l1 = level8_recip(x + k + 8, vr, lo, hi, near);
      l2 = level8_recip(x + k + 16, vr, lo, hi, near);
      l3 = level8_recip(x + k + 24, vr, lo, hi, near);
      divide = _mm256_movemask_ps(near) != 0;
    }
    if (divide) {
      l0 = level8(x + k, vs, lo, hi);
      l1 = level8(x + k + 8, vs, lo, hi);
      l2 = level8(x + k + 16, vs, lo, hi);
      l3 = level8(x + k + 24, vs, lo, hi);
    }
    const __m256i ab = _mm256_packs_epi32(l0, l1);
    const __m256i cd = _mm256_packs_epi32(l2, l3);
    // packs interleave the 128-bit lanes: restore column order (32 int8 codes).
    const __m256i c8 = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(ab, cd), order);
    if (bits == 8) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + k), c8);
    } else {  // int16 lane = [even | odd << 8] -> even & 0xF | (odd & 0xF) << 4
      const __m256i nib = _mm256_or_si256(_mm256_and_si256(c8, _mm256_set1_epi16(0x000F)),
                                          _mm256_and_si256(_mm256_srli_epi16(c8, 4), _mm256_set1_epi16(0x00F0)));
      const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi16(nib, nib), 0x08);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(q + k / 2), _mm256_castsi256_si128(packed));
    }
  }
  for (; k < n; k += bits == 8 ? 1 : 2) {  // k is even here
    const int e = int(quant::detail::level(x[k], s, flo, fhi));
    if (bits == 8) {
      q[k] = uint8_t(int8_t(e));
    } else {
      const int o = k + 1 < n ? int(quant::detail::level(x[k + 1], s, flo, fhi)) : 0;
      q[k / 2] = pack_nibbles(e, o);
    }
  }
}

}  // namespace sinkq::lowbit::detail::avx2

#define SINKQ_LBNS avx2
#include "lowbit/gemm_kernels.inc"

SINKQ_ISA_END

// Outside the target region: taking the addresses needs no AVX2.
namespace sinkq::lowbit::detail {
const LowbitTable& table_avx2() {
  static const LowbitTable t{avx2::gemm, avx2::absmax_bits, avx2::quantize_row};
  return t;
}
}  // namespace sinkq::lowbit::detail
