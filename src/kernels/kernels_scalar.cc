// sinkq/kernels/kernels_scalar.cc — the scalar KernelTable: simd_kernels.inc with a 1-lane "vector".
//
// Baseline x86-64 code (no intrinsics). Same algorithm and tiling as the SIMD paths, so
// SINKQ_ISA=scalar exercises the same control flow; fma is a*b+c with two roundings.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "core/dtype.h"
#include "core/error.h"
#include "kernels/hadamard_kernels.h"
#include "kernels/kernel_table.h"

namespace sinkq::detail::scalar {

struct VT {
  using V = float;
  static constexpr int W = 1;
  static constexpr int kChains = 2;  // the SIMD paths' order and tiling, one lane wide
  static constexpr int kTileRows = 3, kMaxTokens = 2;
  static constexpr int64_t kGemvMaxT = 8;
  static V zero() { return 0.0f; }
  static V set1(float a) { return a; }
  static V load(const float* p) { return *p; }
  static V load_n(const float* p, int n) { return n > 0 ? *p : 0.0f; }  // never called (W == 1)
  static void store(float* p, V v) { *p = v; }
  static void store_n(float* p, V v, int n) { if (n > 0) *p = v; }
  static V bf16(const uint16_t* p) { return bf16_to_f32(*p); }
  static V bf16_n(const uint16_t* p, int n) { return n > 0 ? bf16(p) : 0.0f; }
  static V f16(const uint16_t* p) { return f16_to_f32(*p); }
  static V f16_n(const uint16_t* p, int n) { return n > 0 ? f16(p) : 0.0f; }
  static V fma(V a, V b, V c) { return a * b + c; }
  static V add(V a, V b) { return a + b; }
  static V sub(V a, V b) { return a - b; }
  static V mul(V a, V b) { return a * b; }
  static V div(V a, V b) { return a / b; }
  static V max(V a, V b) { return a > b ? a : b; }
  static float hsum(V v) { return v; }
  static float hmax(V v) { return v; }
  static V exp(V x) { return std::exp(x); }
};

}  // namespace sinkq::detail::scalar

// The scalar Hadamard transform is the reference itself (bit-identical by definition; its loops
// vectorize for SSE2, which the 1-lane tiles of hadamard_simd.inc would not).
#define SINKQ_HADAMARD ::sinkq::ref::hadamard_rows
#define SINKQ_KNS scalar
#define SINKQ_KTABLE kernels_scalar
#include "kernels/simd_kernels.inc"
