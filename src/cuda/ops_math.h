// sinkq/cuda/ops_math.h — the arithmetic of the device's element-wise forward ops (cuda/ops.h):
// RMSNorm, RoPE, SwiGLU, the embedding rows' widening, as plain functions the host compiles too.
//
// What is bit for bit the CPU's (the same fp32 operations in the same order, each rounded once):
// RoPE's rotation (rope_apply_cs), the residual add, the embedding's widening (f16 / bf16 → fp32
// is exact), the online Hadamard (kernels/hadamard_kernels.h fixes its order for every ISA) and
// RMSNorm's last steps (r = 1 / sqrt(ss / n + eps), y = w · (x · r)). What is not, and the bound
// the tests hold it to:
// - RMSNorm's Σ x² is summed in the device's order (each of kRmsThreads threads over a strided
//   share, then a tree); the CPU sums in its ISA's lanes. rmsnorm_rel_bound(n) bounds the device
//   against the exact result (tests/cuda/ops_math_test.cc replays the device order on the host).
// - SiLU's exp is CUDA's expf (≤ 2 ulp) where the CPU has its own polynomial: silu_rel_bound().
#pragma once

#include <cfloat>
#include <cstdint>
#include <cstring>

#include "cuda/linear_math.h"

namespace sinkq::cuda::math {

// Threads of the RMSNorm block (one block a row): thread i sums x[i]², x[i + kRmsThreads]², … in
// order; the kRmsThreads partial sums are then added as a binary tree (lane i + s into lane i,
// s = kRmsThreads / 2, …, 1).
inline constexpr int kRmsThreads = 256;

SINKQ_HD inline float div_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}
SINKQ_HD inline float sqrt_rn(float a) {
#if defined(__CUDA_ARCH__)
  return __fsqrt_rn(a);
#else
  return __builtin_sqrtf(a);
#endif
}

// r = 1 / sqrt(ss / n + eps), as the CPU's rmsnorm (torch.rsqrt in fp32: 1 / sqrt, both rounded).
SINKQ_HD inline float rms_inv(float ss, int64_t n, float eps) {
  return div_rn(1.0f, sqrt_rn(add_rn(div_rn(ss, float(n)), eps)));
}
// y = w · (x · r): the CPU's scale_mul.
SINKQ_HD inline float rms_apply(float x, float r, float w) { return mul_rn(w, mul_rn(x, r)); }

// Roundings on the longest path of the device's Σ x²: the square, the thread's
// ceil(n / kRmsThreads) adds, the tree's log2(kRmsThreads) = 8.
SINKQ_HD constexpr int64_t rms_sum_depth(int64_t n) { return 1 + (n + kRmsThreads - 1) / kRmsThreads + 8; }
// The relative error of a device RMSNorm output against the exact value (and so against
// ref::rmsnorm, which rounds once more): a sum of non-negative terms with k roundings on its
// longest path is within γ_k ≈ k·u of the exact sum, and the square root halves its effect on r;
// then / n, + eps, sqrt, 1 / ·, x · r, w · (·): 6 roundings. u = 2^-24; + 2u for second-order
// terms and the reference's own rounding.
SINKQ_HD constexpr double rmsnorm_rel_bound(int64_t n) { return (0.5 * double(rms_sum_depth(n)) + 8.0) * 0x1.0p-24; }

// RoPE's rotation of one pair (x_i, x_{i+half}) by (c, s): the CPU's rotate_heads
// (a·c − b·s, b·c + a·s, each product and sum rounded once).
SINKQ_HD inline void rope_pair(float& a, float& b, float c, float s) {
  const float x1 = a, x2 = b;
  a = add_rn(mul_rn(x1, c), -mul_rn(x2, s));
  b = add_rn(mul_rn(x2, c), mul_rn(x1, s));
}

// SwiGLU: silu(g)·u = (g / (1 + e))·u with e = exp(−g), the CPU's silu_mul_v order.
SINKQ_HD inline float silu_mul_with(float g, float u, float e) { return mul_rn(div_rn(g, add_rn(1.0f, e)), u); }
// Its relative error against the exact value when e is within 2 ulp (≤ 4u) of exp(−g) (CUDA's
// expf; glibc's is within 1): 1 + e inherits at most 4u and rounds (5u), the quotient 6u, the
// product 7u; + 2u for second-order terms and the reference's rounding. Where e^−g overflows
// (g < −88.7) the device returns ±0 while the exact value is below 1e−36·|u|: kSiluAbsSlack.
SINKQ_HD constexpr double silu_rel_bound() { return 9.0 * 0x1.0p-24; }
inline constexpr double kSiluAbsSlack = 1e-36;

// The online Hadamard (ops_kernels.cu hadamard_kernel) in ref::hadamard_rows's order. The m-step's
// output k = a·m + c of a row: Y_a[c] = 0 + Σ_{r < m} (x[a·m + r] ⊙ pre)·B[r][c], summed in r order.
SINKQ_HD inline float hadamard_mstep(const float* xr, const float* pre, const float* base, int m, int64_t k) {
  const int64_t off = (k / m) * m;
  const int c = int(k - off);
  float acc = 0.0f;
  for (int r = 0; r < m; ++r) {
    const float v = pre ? mul_rn(xr[off + r], pre[off + r]) : xr[off + r];
    acc = add_rn(acc, mul_rn(v, base[r * m + c]));
  }
  return acc;
}
// Butterfly p (of n / 2) of the stage whose blocks are len = h·m floats: (u, w) at the index this
// returns and len after it (blocks X_a, X_{a+h} contiguous), (u, w) ← (u + w, u − w).
SINKQ_HD inline int64_t butterfly_first(int64_t p, int64_t len) { return (p / len) * 2 * len + p % len; }
SINKQ_HD inline void butterfly(float* buf, int64_t p, int64_t len) {
  float* u = buf + butterfly_first(p, len);
  const float x0 = u[0], x1 = u[len];
  u[0] = add_rn(x0, x1);
  u[len] = add_rn(x0, -x1);
}
// The last step of output k: · scale, then ⊙ post.
SINKQ_HD inline float hadamard_out(float v, float scale, const float* post, int64_t k) {
  v = mul_rn(v, scale);
  return post ? mul_rn(v, post[k]) : v;
}

// f16 and bf16 → fp32, exact, bit for bit core/dtype.h's (NaN payloads kept).
SINKQ_HD inline float bits_to_float(uint32_t b) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(b);
#else
  float f;
  std::memcpy(&f, &b, 4);
  return f;
#endif
}
SINKQ_HD inline float widen_bf16(uint16_t h) { return bits_to_float(uint32_t(h) << 16); }
SINKQ_HD inline float widen_f16(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
  if (exp == 0x1f) return bits_to_float(sign | 0x7f800000u | (man << 13));
  if (exp != 0) return bits_to_float(sign | ((exp + 127 - 15) << 23) | (man << 13));
  if (man == 0) return bits_to_float(sign);
  exp = 127 - 15 + 1;  // subnormal: renormalise
  while (!(man & 0x400u)) man <<= 1, --exp;
  return bits_to_float(sign | (exp << 23) | ((man & 0x3ffu) << 13));
}

}  // namespace sinkq::cuda::math
