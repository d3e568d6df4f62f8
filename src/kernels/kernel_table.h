// sinkq/kernels/kernel_table.h — internal: the per-ISA serial kernels behind ops.cc.
//
// Each ISA (scalar, AVX2, AVX-512) provides one KernelTable, built from the same templated source
// (simd_kernels.inc) instantiated with that ISA's vector traits, so the three paths run the same
// algorithm and differ only in vector width. The tables are serial: ops.cc splits the work over
// OpenMP threads and calls them per chunk. Not part of the public API.
#pragma once

#include <cstdint>
#include <utility>

#include "core/dtype.h"
#include "kernels/cpu_features.h"

namespace sinkq::detail {

struct KernelTable {
  // y[t*ldy + r] = sum_k x[t*in + k] * W[r*in + k] (+ bias[r] if non-null), for r in [r0, r1) and
  // t in [0, T). W: [rows, in] of dtype dt. Any T works (T = 1: one row at a time, one stream;
  // larger T: tiles of rows x <= 2 tokens); each output is one fp32 dot whose summation order
  // (simd_kernels.inc: two chains per row) depends only on `in` (not on r0/r1/T), so results do
  // not depend on the thread split or on which tokens share a call. Prefetches may run up to
  // 8 KiB past row r1 (hints: they never fault).
  void (*gemv)(DType dt, const void* W, int64_t in, int64_t r0, int64_t r1, const float* x,
               int64_t T, const float* bias, float* y, int64_t ldy);
  // dst[0, n) = widen(src[0, n)) (exact for every dtype).
  void (*widen)(DType dt, const void* src, float* dst, int64_t n);
  // dst[0, n) = a ggml block type's values, n a multiple of its block: gguf_dequantize's bits on
  // every ISA (the scalar table is that reference; dequant_simd.inc says why SIMD keeps them).
  void (*dequant)(DType dt, const void* src, float* dst, int64_t n);
  // The T = 1 gemv over a ggml block-type W (rows [r0, r1), no ldy): each block decoded in
  // registers and multiplied in gemv's order — the bits of gemv over the dequantized rows. False
  // (nothing written) for a type without such a kernel (every type in the scalar table).
  bool (*dot_blocks)(DType dt, const void* W, int64_t in, int64_t r0, int64_t r1, const float* x,
                     const float* bias, float* y);
  // s[j] = scale * dot(q[0, d), K[j*ldk + 0 .. d)) for j in [0, n).
  void (*scores)(const float* q, const float* K, int64_t ldk, int64_t n, int d, float scale,
                 float* s);
  // s[j] = exp(s[j] - max_j s); returns the fp32 sum of the new s[j].
  float (*exp_shift_sum)(float* s, int64_t n);
  // out[0, d) = alpha * sum_j p[j] * V[j*ldv + 0 .. d).
  void (*weighted_sum)(const float* p, const float* V, int64_t ldv, int64_t n, int d, float alpha,
                       float* out);
  // x[0, n) *= a.
  void (*scale)(float* x, int64_t n, float a);
  // Sum of squares of x[0, n) in fp32.
  float (*sumsq)(const float* x, int64_t n);
  // y = w * (x * r), elementwise over n (HF order: x * rsqrt(var + eps), then weight *). y may alias x.
  void (*scale_mul)(const float* x, const float* w, float r, float* y, int64_t n);
  // g = g / (1 + exp(-g)) * u over n (SwiGLU).
  void (*silu_mul)(float* g, const float* u, int64_t n);
  // Plain fp32 sum of x[0, n) (used by the memory-bandwidth probe).
  float (*sum)(const float* x, int64_t n);
  // The Hadamard transform of hadamard_kernels.h on rows [0, rows) of x[rows, pow2 * m], in place;
  // bit-identical to ref::hadamard_rows on every ISA (hadamard_simd.inc says why). m <= 256.
  void (*hadamard)(float* x, int64_t rows, int64_t pow2, int m, const float* base, float scale,
                   const float* pre, const float* post);
  // matmul uses gemv for T <= gemv_max_t and sgemm above. Measured on one Zen core (out x in from
  // 2048x2048 to 1024x14336): the weight-streaming gemv beats OpenBLAS sgemm (plus widening for
  // BF16/F16) up to T = 64 with AVX-512 (ties for F32 at T = 64) and T ~ 16 with AVX2; sgemm has
  // a large fixed cost at small T and widening a BF16 matrix costs as much as ~30 GEMV tokens.
  int64_t gemv_max_t;
};

// Threads for a job estimated at `ns` nanoseconds on one core (1 below ~20 us; ~4 us inside a
// step's team, team.h): the dispatchers' threading policy.
int threads_for(double ns);

const KernelTable& kernels_scalar();
const KernelTable& kernels_avx2();
const KernelTable& kernels_avx512();
const KernelTable& kernels_for(Isa isa);  // the table of `isa`
const KernelTable& kernels();             // the table of active_isa()

}  // namespace sinkq::detail
