// sinkq/kernels/ops.h — the fp32 operators of the forward pass.
//
// Shapes: weights [out, in] row-major (HF nn.Linear); activations [tokens, features] row-major.
// Each op has a plain scalar reference in namespace sinkq::ref (ops_ref.cc) that tests hold the
// fast versions to. Fast versions use hand-written AVX2 / AVX-512 GEMV for small T (decode; up to
// T = 64 with AVX-512, 16 with AVX2, 8 scalar) and OpenBLAS sgemm above, chosen at run time
// (cpu_features.h); all cores through OpenMP.
//
// Threading: every op parallelises internally over num_threads() threads (small jobs stay on the
// calling thread) through team.h's parallel loops: an OpenMP region per loop, or, inside
// run_in_team() (a decode step), the step's team; OpenBLAS is pinned to one thread and driven from
// those threads, so there is one thread pool. Call the ops from one thread at a time (calls from
// inside an enclosing OpenMP region run single-threaded: nested parallelism is off). Results do not
// depend on the thread count or the team (each output is computed by one thread in a fixed order).
// Memory: no alignment requirements; per-thread scratch is thread_local and kept (BF16/F16 sgemm:
// <= ~2 MiB of fp32 rows; attention: n_past + T floats).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/mat.h"
#include "core/rope.h"
#include "kernels/cpu_features.h"

namespace sinkq {

// y[T, out] = x[T, in] · W^T (+ bias[out] if non-null). W: [out, in] in F32/F16/BF16.
// Accumulates in fp32. y must not alias x.
void matmul(const float* x, int64_t T, const Mat& W, const float* bias, float* y);
// The most rows for which matmul gives every row the bits it gives that row alone, on every ISA
// path (each takes the multi-token GEMV up to its gemv_max_t, summing each row in one order; above
// that, sgemm). Forward::step_batch is exact against single steps up to this many sequences.
int64_t matmul_rowwise_max();
// The same on the active ISA only (its gemv_max_t: 8 scalar, 16 AVX2, 64 AVX-512): the bound that
// holds between two calls made on the same ISA (Forward::step_batch's linear groups).
int64_t matmul_rowwise_rows();

// y[t, :] = x[t, :] / sqrt(mean(x[t, :]^2) + eps) * w   (HF LlamaRMSNorm, fp32). y may alias x.
void rmsnorm(const float* x, const float* w, float* y, int64_t T, int64_t n, float eps);

// Gathers rows of the embedding table (any dtype) into fp32 out[T, hidden].
// Throws sinkq::Error if an id is outside [0, vocab).
void embed_rows(const Mat& table, std::span<const int32_t> ids, float* out);

// RoPE tables: inv_freq[head_dim/2] with rope_scaling applied (HF _compute_llama3_parameters
// for "llama3"; "linear" divides inv_freq by factor), cos/sin computed per position on
// the fly in double, then rounded to fp32 like HF computes them in fp32. Every other step (inv_freq,
// the llama3 blend, angle = inv_freq * pos, the rotation) is done in fp32 in HF's order.
// "linear": HF >= 4.38 divides inv_freq by factor (older code divided positions); make() does the
// former, so position_scale stays 1 (it is honoured if a caller sets it).
struct RopeTable {
  int head_dim = 0;
  std::vector<float> inv_freq;       // [head_dim/2]
  float position_scale = 1.0f;       // positions are multiplied by this (1: unused)
  static RopeTable make(const RopeParams& p);
};

// In-place rotate_half RoPE (HF convention: pairs (i, i + head_dim/2)) on x[T, n_heads, head_dim]
// with absolute positions pos[T].
void rope_apply(const RopeTable& rt, float* x, int64_t T, int n_heads, std::span<const int32_t> pos);
// The cos | sin row rope_apply uses for position `pos`: cs[0, head_dim/2) cos, the rest sin.
void rope_cos_sin(const RopeTable& rt, int32_t pos, float* cs);
// rope_apply with those rows precomputed: cs [T, head_dim], one per row of x (bit-identical to
// rope_apply at the same positions: a cache of positions needs no trigonometry per call).
void rope_apply_cs(const float* cs, int head_dim, float* x, int64_t T, int n_heads);

// g[T, n] = silu(g) * u   (SwiGLU); in place on g.
void silu_mul(float* g, const float* u, int64_t T, int64_t n);
// g[T, n] = gelu_tanh(g) * u   (GeGLU, Gemma: 0.5·g·(1 + tanh(√(2/π)·(g + 0.044715·g³)))); in place.
// Scalar (std::tanh) on every ISA: one definition, no SIMD variant to test.
void gelu_tanh_mul(float* g, const float* u, int64_t T, int64_t n);

// Numerically stable softmax over x[n] in place.
void softmax(float* x, int64_t n);

// Causal GQA attention for T new queries against a KV cache.
// q: [T, n_heads, head_dim] (after RoPE); K/V cache: [n_ctx, n_kv_heads, head_dim] with the T new
// rows already written at rows [n_past, n_past + T). Query t sits at cache row n_past + t and
// attends rows [max(0, n_past+t-window+1) .. n_past + t] (window = 0: no sliding window).
// out: [T, n_heads, head_dim]. scale = 1/sqrt(head_dim). T < 8: parallel over (token, kv head),
// the group's heads over each chunk of K / V rows;
// T >= 8 (prefill): blocked, parallel over (block of <= 64 tokens, head), scores and P·V by
// single-threaded sgemm (ops.cc attention_blocked). Results never depend on the thread count.
struct AttnShape {
  int n_heads = 0, n_kv_heads = 0, head_dim = 0;
  int sliding_window = 0;
  float scale = 0.0f;    // the score scale; 0: 1/sqrt(head_dim) (in fp32, as HF computes it)
  float softcap = 0.0f;  // > 0: scores -> softcap * tanh(scores / softcap) before the softmax (Gemma 2)
  float score_scale() const { return scale > 0 ? scale : float(1.0 / std::sqrt(double(head_dim))); }
  // The soft-cap over n scores in place (nothing when softcap is 0).
  void cap(float* s, int64_t n) const {
    if (softcap > 0)
      for (int64_t i = 0; i < n; ++i) s[i] = softcap * std::tanh(s[i] / softcap);
  }
  // The first (absolute) position a query at absolute position `pos` sees.
  int64_t first_visible(int64_t pos) const {
    return sliding_window > 0 ? std::max<int64_t>(0, pos - sliding_window + 1) : 0;
  }
};
void attention(const AttnShape& s, const float* q, const float* k_cache, const float* v_cache,
               int64_t n_past, int64_t T, float* out);

// Keys and values of a shared prefix that sits in front of the cache (PrefixQuant / IntactKV):
// `rows` rows of [n_kv_heads, head_dim] at absolute positions 0..rows-1, held elsewhere (never
// copied into a sequence's cache). rows = 0: no prefix.
struct KvSegment {
  const float* k = nullptr;
  const float* v = nullptr;
  int64_t rows = 0;
};
// The same attention with `prefix` in front: cache row j is absolute position prefix.rows + j,
// query t sits at prefix.rows + n_past + t, and the window (if any) counts absolute positions.
// Equal to attention() over the concatenation [prefix; cache] up to fp32 summation order (the
// two segments' weighted sums are added at the end).
void attention(const AttnShape& s, const float* q, const KvSegment& prefix, const float* k_cache,
               const float* v_cache, int64_t n_past, int64_t T, float* out);

// C[M, N] = alpha·op(A)·op(B) + beta·C, row-major fp32, op(X) = Xᵀ when its flag is set (A is
// [M, K] or, transposed, [K, M]; B is [K, N] or [N, K]); leading dimensions as BLAS's. sgemm_1t
// on fixed 64-row blocks of C spread over the threads (results independent of the thread
// count). The training code's linear layers (train/grad_ops.h) run on it.
// The same product as one single-threaded sgemm on the calling thread: oneDNN's on the AVX-512
// path, OpenBLAS's otherwise (ops.cc). Deterministic for given shapes and ISA path.
void sgemm_1t(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
              const float* B, int64_t ldb, float beta, float* C, int64_t ldc);
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
          const float* B, int64_t ldb, float beta, float* C, int64_t ldc);
// The library and kernel set sgemm_1t runs on the given ISA path, e.g. "oneDNN 2.6.3 (avx512_core_bf16)"
// or "OpenBLAS 0.3.21 (Haswell)": both pick their kernels by CPUID (OpenBLAS 0.3.21 gives Intel
// family-6 models it has no case for its SSE3 "Prescott" kernels), and a result's bits depend on that
// choice (docs/architecture.md "Reproducibility"). OPENBLAS_CORETYPE / ONEDNN_MAX_CPU_ISA set it.
std::string sgemm_backend(Isa isa);

namespace ref {
// Scalar references: straightforward loops, double accumulation where it clarifies intent.
void matmul(const float* x, int64_t T, const Mat& W, const float* bias, float* y);
void rmsnorm(const float* x, const float* w, float* y, int64_t T, int64_t n, float eps);
void rope_apply(const RopeTable& rt, float* x, int64_t T, int n_heads, std::span<const int32_t> pos);
void silu_mul(float* g, const float* u, int64_t T, int64_t n);
void gelu_tanh_mul(float* g, const float* u, int64_t T, int64_t n);
void softmax(float* x, int64_t n);
void attention(const AttnShape& s, const float* q, const float* k_cache, const float* v_cache,
               int64_t n_past, int64_t T, float* out);
void attention(const AttnShape& s, const float* q, const KvSegment& prefix, const float* k_cache,
               const float* v_cache, int64_t n_past, int64_t T, float* out);
}  // namespace ref

// Number of worker threads the kernels use (OpenMP and OpenBLAS); default: all cores, or
// SINKQ_THREADS from the environment.
int num_threads();
void set_num_threads(int n);
// Pins OpenBLAS to one thread (once; idempotent). Every sgemm call site calls it first: the results of
// OpenBLAS's threaded driver depend on its partition (AVX2 hosts), sinkq's must not.
void blas_single_threaded();

}  // namespace sinkq
