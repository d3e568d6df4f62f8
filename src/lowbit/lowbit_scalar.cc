// sinkq/lowbit/lowbit_scalar.cc — the scalar LowbitTable: gemm_kernels.inc with 16-lane arrays.
//
// Baseline x86-64 code (no intrinsics), the same algorithm and KernelWeights layout as the SIMD
// paths, so SINKQ_ISA=scalar exercises the same control flow.
#include <cstdint>

#include "formats/quantizer.h"
#include "lowbit/formats.h"
#include "lowbit/table.h"

namespace sinkq::lowbit::detail::scalar {

struct VT {
  static constexpr int kGemvBlocks = 1, kGemvChains = 1, kGemmBlocks = 1;
  static constexpr int kTokens8 = 4, kTokens4 = 4, kTokens4G = 4;
  static constexpr bool kSigned8 = false;
  struct I16 {
    int32_t v[16];
  };
  struct F16 {
    float v[16];
  };
  using Acc8 = I16;
  using Acc4 = I16;
  struct W8 {
    const uint8_t* p;
  };
  using W4 = W8;
  static int32_t byte(int32_t x4, int j) { return int8_t(uint32_t(x4) >> (8 * j)); }
  static I16 zero8() { return I16{}; }
  static I16 zero4() { return I16{}; }
  static W8 load8(const uint8_t* p) { return {p}; }
  static W4 load4(const uint8_t* p) { return {p}; }
  static void dot8(Acc8& a, const W8& w, int32_t x4) {
    for (int i = 0; i < 16; ++i)
      for (int j = 0; j < 4; ++j) a.v[i] += int32_t(w.p[4 * i + j]) * byte(x4, j);
  }
  static void dot4(Acc4& a, const W4& w, int32_t xlo, int32_t xhi) {
    for (int i = 0; i < 16; ++i)
      for (int j = 0; j < 4; ++j) {
        const int32_t u = w.p[4 * i + j];
        a.v[i] += (u & 0xF) * byte(xlo, j) + (u >> 4) * byte(xhi, j);
      }
  }
  static I16 fin(const I16& a) { return a; }
  static I16 sub_scalar(I16 a, int32_t c) {
    for (int32_t& x : a.v) x -= c;
    return a;
  }
  static I16 sub_mul(I16 a, const int32_t* z, int32_t c) {
    for (int i = 0; i < 16; ++i) a.v[i] -= z[i] * c;
    return a;
  }
  static F16 cvt(const I16& a) {
    F16 r;
    for (int i = 0; i < 16; ++i) r.v[i] = float(a.v[i]);
    return r;
  }
  static F16 load(const float* p) { return load_n(p, 16); }
  static F16 load_n(const float* p, int n) {
    F16 r{};
    for (int i = 0; i < n; ++i) r.v[i] = p[i];
    return r;
  }
  static F16 set1(float s) {
    F16 r;
    for (float& x : r.v) x = s;
    return r;
  }
  static F16 zero() { return F16{}; }
  static F16 mul(F16 a, const F16& b) {
    for (int i = 0; i < 16; ++i) a.v[i] = a.v[i] * b.v[i];
    return a;
  }
  static F16 add(F16 a, const F16& b) {
    for (int i = 0; i < 16; ++i) a.v[i] = a.v[i] + b.v[i];
    return a;
  }
  static void store_n(float* p, const F16& v, int n) {
    for (int i = 0; i < n; ++i) p[i] = v.v[i];
  }
};

uint32_t absmax_bits(const float* x, int64_t n) {
  uint32_t m = 0;
  for (int64_t k = 0; k < n; ++k) {
    uint32_t b;
    __builtin_memcpy(&b, x + k, 4);
    b &= 0x7fffffffu;
    m = b > m ? b : m;
  }
  return m;
}

void quantize_row(const float* x, int64_t n, float s, int bits, uint8_t* q, const float* /*next*/) {
  const float lo = float(-(1 << (bits - 1))), hi = float((1 << (bits - 1)) - 1);
  if (bits == 8) {
    for (int64_t k = 0; k < n; ++k) q[k] = uint8_t(int8_t(quant::detail::level(x[k], s, lo, hi)));
    return;
  }
  for (int64_t k = 0; k < n; k += 2) {
    const int e = int(quant::detail::level(x[k], s, lo, hi));
    const int o = k + 1 < n ? int(quant::detail::level(x[k + 1], s, lo, hi)) : 0;
    q[k / 2] = pack_nibbles(e, o);
  }
}

}  // namespace sinkq::lowbit::detail::scalar

#define SINKQ_LBNS scalar
#include "lowbit/gemm_kernels.inc"

namespace sinkq::lowbit::detail {
const LowbitTable& table_scalar() {
  static const LowbitTable t{scalar::gemm, scalar::absmax_bits, scalar::quantize_row};
  return t;
}
}  // namespace sinkq::lowbit::detail
