// sinkq/lowbit/lowbit_avx512.cc — the AVX-512 VNNI LowbitTable: a 16-row block is one zmm.
//
// vpdpbusd: each int32 lane (one row) adds the 4 products u8 weight x s8 activation of one step;
// the activation quadruple is a 32-bit broadcast from memory. u8 x s8 products are at most
// 255·128, four per lane per instruction, no saturation (the non-saturating form). Needs
// AVX512-VNNI besides F+BW+VL (kernels.cc checks it before selecting this table).
// Compiled with SINKQ_ISA_BEGIN (kernels/isa_region.h) after every include (see
// kernels/kernels_avx2.cc).
#include <immintrin.h>

#include <cstdint>

#include "formats/quantizer.h"
#include "lowbit/formats.h"
#include "lowbit/table.h"
#include "kernels/isa_region.h"

SINKQ_ISA_BEGIN("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")
// GCC 12 false positive (bug 105593): the AVX-512 intrinsics use _mm*_undefined_*() internally.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace sinkq::lowbit::detail::avx512 {

struct VT {
  // 32 zmm: GEMM 8-bit 2 blocks x 8 tokens = 16 accumulators; 4-bit per-group 2 x 4 int32 + 2 x 4
  // fp32 accumulators. GEMV: one block (16 rows) at a time, one stream through memory, over 4
  // accumulators (vpdpbusd's latency; 4-bit does two per step): 4 blocks at once (4 streams) were
  // 1.3-1.6x slower from DRAM (BENCHMARKS.md, eleventh session).
  static constexpr int kGemvBlocks = 1, kGemvChains = 4, kGemmBlocks = 2;
  static constexpr int kTokens8 = 8, kTokens4 = 8, kTokens4G = 4;
  static constexpr bool kSigned8 = false;  // vpdpbusd takes the offset bytes directly
  using I16 = __m512i;
  using F16 = __m512;
  using Acc8 = __m512i;
  using Acc4 = __m512i;
  using W8 = __m512i;
  struct W4 {
    __m512i lo, hi;  // columns 0-3 / 4-7 of the 16 rows
  };
  static __m512i zero8() { return _mm512_setzero_si512(); }
  static __m512i zero4() { return _mm512_setzero_si512(); }
  static W8 load8(const uint8_t* p) { return _mm512_loadu_si512(p); }
  static void dot8(Acc8& a, const W8& w, int32_t x4) { a = _mm512_dpbusd_epi32(a, w, _mm512_set1_epi32(x4)); }
  static W4 load4(const uint8_t* p) {
    const __m512i m = _mm512_set1_epi8(0x0F), v = _mm512_loadu_si512(p);
    return {_mm512_and_si512(v, m), _mm512_and_si512(_mm512_srli_epi16(v, 4), m)};
  }
  static void dot4(Acc4& a, const W4& w, int32_t xlo, int32_t xhi) {
    a = _mm512_dpbusd_epi32(a, w.lo, _mm512_set1_epi32(xlo));
    a = _mm512_dpbusd_epi32(a, w.hi, _mm512_set1_epi32(xhi));
  }
  static I16 fin(const __m512i& a) { return a; }
  static __m512i acc_add(__m512i a, __m512i b) { return _mm512_add_epi32(a, b); }
  static I16 sub_scalar(I16 i, int32_t c) { return _mm512_sub_epi32(i, _mm512_set1_epi32(c)); }
  static I16 sub_mul(I16 i, const int32_t* z, int32_t c) {
    return _mm512_sub_epi32(i, _mm512_mullo_epi32(_mm512_loadu_si512(z), _mm512_set1_epi32(c)));
  }
  static F16 cvt(I16 i) { return _mm512_cvt_roundepi32_ps(i, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  static F16 load(const float* p) { return _mm512_loadu_ps(p); }
  static __mmask16 mask(int n) { return __mmask16((1u << n) - 1u); }
  static F16 load_n(const float* p, int n) { return _mm512_maskz_loadu_ps(mask(n), p); }
  static F16 set1(float s) { return _mm512_set1_ps(s); }
  static F16 zero() { return _mm512_setzero_ps(); }
  static F16 mul(F16 a, F16 b) { return _mm512_mul_ps(a, b); }
  static F16 add(F16 a, F16 b) { return _mm512_add_ps(a, b); }
  static void store_n(float* p, F16 v, int n) { _mm512_mask_storeu_ps(p, mask(n), v); }
};

uint32_t absmax_bits(const float* x, int64_t n) {
  // Four independent accumulators (vpmaxud has a 1-cycle latency but 2 per cycle issue); the sign
  // bit is masked once per vector.
  const __m512i m = _mm512_set1_epi32(0x7fffffff);
  __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
  int64_t k = 0;
  for (; k + 64 <= n; k += 64) {
    a0 = _mm512_max_epu32(a0, _mm512_and_si512(_mm512_loadu_si512(x + k), m));
    a1 = _mm512_max_epu32(a1, _mm512_and_si512(_mm512_loadu_si512(x + k + 16), m));
    a2 = _mm512_max_epu32(a2, _mm512_and_si512(_mm512_loadu_si512(x + k + 32), m));
    a3 = _mm512_max_epu32(a3, _mm512_and_si512(_mm512_loadu_si512(x + k + 48), m));
  }
  for (; k + 16 <= n; k += 16) a0 = _mm512_max_epu32(a0, _mm512_and_si512(_mm512_loadu_si512(x + k), m));
  if (k < n) a1 = _mm512_max_epu32(a1, _mm512_and_si512(_mm512_maskz_loadu_epi32(VT::mask(int(n - k)), x + k), m));
  return _mm512_reduce_max_epu32(_mm512_max_epu32(_mm512_max_epu32(a0, a1), _mm512_max_epu32(a2, a3)));
}

// quant::detail::level on 16 lanes (maxps/minps return the second operand on NaN, as the scalar
// `v > lo ? v : lo`; the conversion rounds half to even by its embedded rounding mode).
inline __m512i level16(__m512 x, __m512 s, __m512 lo, __m512 hi) {
  const __m512 v = _mm512_min_ps(_mm512_max_ps(_mm512_div_ps(x, s), lo), hi);
  return _mm512_cvt_roundps_epi32(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}

// The same codes from x·r, r = RN(1/s), where that provably equals the division (table.h,
// recip_ok): lanes whose clamped x·r lies within kTieMargin of a half-integer may round
// differently from RN(x/s) and send the whole vector to the division (level16).
inline __m512i level16_recip(__m512 x, __m512 s, __m512 r, __m512 lo, __m512 hi) {
  const __m512 v = _mm512_min_ps(_mm512_max_ps(_mm512_mul_ps(x, r), lo), hi);
  const __m512i c = _mm512_cvt_roundps_epi32(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 d = _mm512_abs_ps(_mm512_sub_ps(v, _mm512_cvtepi32_ps(c)));  // |v - rne(v)| <= 0.5
  if (__builtin_expect(_mm512_cmp_ps_mask(d, _mm512_set1_ps(0.5f - kTieMargin), _CMP_GE_OQ) != 0, 0))
    return level16(x, s, lo, hi);
  return c;
}

void quantize_row(const float* x, int64_t n, float s, int bits, uint8_t* q, const float* next) {
  const float flo = float(-(1 << (bits - 1))), fhi = float((1 << (bits - 1)) - 1);
  const __m512 vs = _mm512_set1_ps(s), lo = _mm512_set1_ps(flo), hi = _mm512_set1_ps(fhi);
  const bool fast = recip_ok(s);
  const __m512 vr = _mm512_set1_ps(fast ? 1.0f / s : 0.0f);
  auto codes16 = [&](const float* p) {
    const __m512 xv = _mm512_loadu_ps(p);
    return fast ? level16_recip(xv, vs, vr, lo, hi) : level16(xv, vs, lo, hi);
  };
  int64_t k = 0;
  if (bits == 8) {
    for (; k + 64 <= n; k += 64) {  // four vectors in flight
      if (next)
        for (int j = 0; j < 64; j += 16) _mm_prefetch(reinterpret_cast<const char*>(next + k + j), _MM_HINT_T0);
      const __m512i a = codes16(x + k), b = codes16(x + k + 16), c = codes16(x + k + 32), d = codes16(x + k + 48);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(q + k), _mm512_cvtepi32_epi8(a));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(q + k + 16), _mm512_cvtepi32_epi8(b));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(q + k + 32), _mm512_cvtepi32_epi8(c));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(q + k + 48), _mm512_cvtepi32_epi8(d));
    }
    for (; k + 16 <= n; k += 16) _mm_storeu_si128(reinterpret_cast<__m128i*>(q + k), _mm512_cvtepi32_epi8(codes16(x + k)));
    if (k < n) {
      const __mmask16 m = VT::mask(int(n - k));
      _mm512_mask_cvtepi32_storeu_epi8(q + k, m, level16(_mm512_maskz_loadu_ps(m, x + k), vs, lo, hi));
    }
    return;
  }
  for (; k + 32 <= n; k += 32) {
    if (next) {
      _mm_prefetch(reinterpret_cast<const char*>(next + k), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(next + k + 16), _MM_HINT_T0);
    }
    const __m128i a = _mm512_cvtepi32_epi8(codes16(x + k));
    const __m128i b = _mm512_cvtepi32_epi8(codes16(x + k + 16));
    // int16 lane = [even | odd << 8] -> even & 0xF | (odd & 0xF) << 4, narrowed to bytes
    const __m256i c = _mm256_inserti128_si256(_mm256_castsi128_si256(a), b, 1);
    const __m256i nib = _mm256_or_si256(_mm256_and_si256(c, _mm256_set1_epi16(0x000F)),
                                        _mm256_and_si256(_mm256_srli_epi16(c, 4), _mm256_set1_epi16(0x00F0)));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + k / 2), _mm256_cvtepi16_epi8(nib));
  }
  for (; k < n; k += 2) {  // k is even here
    const int e = int(quant::detail::level(x[k], s, flo, fhi));
    const int o = k + 1 < n ? int(quant::detail::level(x[k + 1], s, flo, fhi)) : 0;
    q[k / 2] = pack_nibbles(e, o);
  }
}

}  // namespace sinkq::lowbit::detail::avx512

#define SINKQ_LBNS avx512
#include "lowbit/gemm_kernels.inc"

#pragma GCC diagnostic pop
SINKQ_ISA_END

// Outside the target region: taking the addresses needs no AVX-512.
namespace sinkq::lowbit::detail {
const LowbitTable& table_avx512() {
  static const LowbitTable t{avx512::gemm, avx512::absmax_bits, avx512::quantize_row};
  return t;
}
}  // namespace sinkq::lowbit::detail
