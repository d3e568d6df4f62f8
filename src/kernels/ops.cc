// sinkq/kernels/ops.cc — the fast operators: threading, dispatch, and the sgemm path.
//
// The serial inner loops live in the per-ISA KernelTables (kernel_table.h); this file splits work
// over threads (num_threads(), through team.h's parallel loops) and picks the table of
// active_isa() on every call, so set_isa() / SINKQ_ISA take effect immediately.
//
// matmul:  small T (<= 64 AVX-512, 16 AVX2, 8 scalar; KernelTable::gemv_max_t): GEMV straight from
//          the stored dtype, all T tokens per pass over the weights (decode is bound by weight
//          bytes: at T = 1 each thread streams its rows one at a time); larger T: sgemm on blocks
//          of output features handed to the threads.
//          BF16/F16 blocks are widened into a thread-local fp32 scratch first (bounded memory).
// sgemm:   every call is single-threaded on the calling thread (sgemm_1t): oneDNN's on the AVX-512
//          path (its JIT AVX-512 kernels: 1.7-1.9x OpenBLAS 0.3.21's on Zen 5, BENCHMARKS.md),
//          OpenBLAS otherwise (on the AVX2 path the two are at par, and oneDNN's ISA is fixed for
//          the process while SINKQ_ISA / set_isa switch on every call).
#include <algorithm>
#include <cmath>
#include <vector>

#include <cblas.h>
#include <dnnl.h>
#include <omp.h>

#include "core/error.h"
#include "kernels/cpu_features.h"
#include "kernels/kernel_table.h"
#include "kernels/ops.h"
#include "kernels/team.h"

namespace sinkq {
namespace detail {

const KernelTable& kernels_for(Isa isa) {
  switch (isa) {
    case Isa::Avx512: return kernels_avx512();
    case Isa::Avx2: return kernels_avx2();
    case Isa::Scalar: break;
  }
  return kernels_scalar();
}

const KernelTable& kernels() { return kernels_for(active_isa()); }

// Threads for a job estimated at `ns` nanoseconds on one core: below ~20 us an OpenMP region
// (1-2 us of fork/join when the cores are idle, tens of us when its workers sleep on a futex, as
// they do under OMP_WAIT_POLICY=passive) is not worth it; inside a step's team (team.h), whose
// workers spin between loops, the hand-off costs ~1 us and jobs from ~4 us on are split.
// The estimates below are rough single-core rates on a current x86 core.
int threads_for(double ns) { return ns < (in_team() ? 4000.0 : 20000.0) ? 1 : num_threads(); }

}  // namespace detail

namespace {

using detail::KernelTable;
using detail::threads_for;

// Rows per widening block of the BF16/F16 sgemm path: ~2 MiB of fp32 scratch per thread (large
// enough that sgemm's per-call packing of x is amortised, small enough to stay in L3), at least
// 16 and at most 256 rows.
int64_t widen_block_rows(int64_t in) {
  int64_t rb = (int64_t(2) << 20) / (4 * std::max<int64_t>(in, 1));
  rb = rb / 16 * 16;
  return std::clamp<int64_t>(rb, 16, 256);
}

}  // namespace

void sgemm_1t(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
              const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if (active_isa() == Isa::Avx512) {
    // oneDNN runs an OpenMP region of omp_get_max_threads() threads outside a parallel region
    // (inside one, nested regions are off): one thread, so that a result never depends on it.
    const int saved = omp_get_max_threads();
    if (saved != 1) omp_set_num_threads(1);
    const dnnl_status_t st = dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb,
                                        beta, C, ldc);
    if (saved != 1) omp_set_num_threads(saved);
    SINKQ_CHECK(st == dnnl_success, "oneDNN sgemm [{} x {} x {}] failed (status {})", M, N, K, int(st));
    return;
  }
  blas_single_threaded();
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, int(M), int(N),
              int(K), alpha, A, int(lda), B, int(ldb), beta, C, int(ldc));
}

std::string sgemm_backend(Isa isa_path) {
  if (isa_path == Isa::Avx512) {
    const dnnl_version_t* v = dnnl_version();
    std::string isa = "unknown ISA";
    switch (dnnl_get_effective_cpu_isa()) {
      case dnnl_cpu_isa_avx2: isa = "avx2"; break;
      case dnnl_cpu_isa_avx2_vnni: isa = "avx2_vnni"; break;
      case dnnl_cpu_isa_avx512_core: isa = "avx512_core"; break;
      case dnnl_cpu_isa_avx512_core_vnni: isa = "avx512_core_vnni"; break;
      case dnnl_cpu_isa_avx512_core_bf16: isa = "avx512_core_bf16"; break;
      case dnnl_cpu_isa_avx512_core_amx: isa = "avx512_core_amx"; break;
      default: break;
    }
    return fmt::format("oneDNN {}.{}.{} ({})", v->major, v->minor, v->patch, isa);
  }
  std::string config = openblas_get_config();  // "OpenBLAS 0.3.21 NO_LAPACKE DYNAMIC_ARCH ..."
  const size_t sp = config.find(' ', config.find(' ') + 1);
  return fmt::format("{} ({})", config.substr(0, sp), openblas_get_corename());
}

namespace {

// n elements of W's type at src widened to fp32: the ISA's kernel for F16 / BF16, its
// dequantizer for ggml block types (the reference's bits on every ISA).
void widen(const KernelTable& k, DType t, const void* src, float* dst, int64_t n) {
  if (dtype_is_block(t)) return k.dequant(t, src, dst, n);
  k.widen(t, src, dst, n);
}

// GEMV rows [r0, r1) of a ggml block-type W. T = 1 (decode): the ISA's fused kernel, each block
// decoded in registers and multiplied in the F32 kernel's order (KernelTable::dot_blocks). Else, and
// for types without one: a tile of rows at a time dequantized into
// thread-local fp32 and run on the F32 kernel, whose per-row summation order does not depend on
// the rows it is given — the same bits as over a model widened at load. The tile is sized to stay
// in L2 (~96 KiB of fp32, at least 6 rows: a multiple of every ISA's row tile, 6 / 3), so the
// F32 kernel reads it back from cache, not DRAM.
void gemv_blocks(const KernelTable& k, const Mat& W, int64_t r0, int64_t r1, const float* x, int64_t T,
                 const float* bias, float* y) {
  const int64_t in = W.cols;
  const int64_t kTile = std::max<int64_t>(6, (int64_t(96) << 10) / (4 * in) / 6 * 6);
  const size_t row_bytes = dtype_row_bytes(W.dtype, in);
  if (T == 1 && k.dot_blocks(W.dtype, W.data, in, r0, r1, x, bias, y)) return;
  static thread_local std::vector<float> tile;
  if (tile.size() < size_t(kTile * in)) tile.resize(size_t(kTile * in));
  for (int64_t a = r0; a < r1; a += kTile) {
    const int64_t n = std::min(kTile, r1 - a);
    k.dequant(W.dtype, static_cast<const char*>(W.data) + size_t(a) * row_bytes, tile.data(), n * in);
    k.gemv(DType::F32, tile.data(), in, 0, n, x, T, bias ? bias + a : nullptr, y + a, W.rows);
  }
}

// y[:, r0:r1) = x[T, in] · Wf[r0:r1, in]^T with Wf fp32 (row stride in), y row stride ldy.
void sgemm_rows(const float* x, int64_t T, const float* Wf, int64_t nrows, int64_t in, float* y,
                int64_t ldy) {
  sgemm_1t(false, true, T, nrows, in, 1.0f, x, in, Wf, in, 0.0f, y, ldy);
}

void matmul_sgemm(const KernelTable& k, const float* x, int64_t T, const Mat& W, const float* bias,
                  float* y) {
  const int64_t out = W.rows, in = W.cols;
  const size_t row_bytes = dtype_row_bytes(W.dtype, in);
  const bool f32 = W.dtype == DType::F32;
  // Blocks of output features handed out dynamically: a thread that loses its core for a while
  // (shared machine) delays one block, not half the matrix. ggml block types (a GGUF model held
  // as stored) take F32's blocks: the same sgemm calls on the same fp32 values as a model
  // widened at load, so the same bits.
  const int64_t rb = f32 || dtype_is_block(W.dtype) ? 256 : widen_block_rows(in);
  const int64_t nblocks = (out + rb - 1) / rb;
  const int nt = threads_for(double(T) * double(out) * double(in) / 25.0);  // ~50 GFLOP/s
  parallel_for(nt, nblocks, 1, [&](int64_t blk, int64_t) {
    // Thread-local: lives as long as the worker thread, sized for the largest `in` seen.
    static thread_local std::vector<float> scratch;
    if (!f32 && scratch.size() < size_t(rb * in)) scratch.resize(size_t(rb * in));
    const int64_t r0 = blk * rb, nb = std::min(rb, out - r0);
    const char* src = static_cast<const char*>(W.data) + size_t(r0) * row_bytes;
    if (f32) {
      sgemm_rows(x, T, reinterpret_cast<const float*>(src), nb, in, y + r0, out);
    } else {
      widen(k, W.dtype, src, scratch.data(), nb * in);
      sgemm_rows(x, T, scratch.data(), nb, in, y + r0, out);
    }
    if (bias)
      for (int64_t t = 0; t < T; ++t)
        for (int64_t r = r0; r < r0 + nb; ++r) y[t * out + r] += bias[r];
  });
}

// Rows per GEMV work item: ~8 items per thread for balance, 24..240 rows, a multiple of every
// ISA's small-batch tile (6 / 3 rows) so tiles stay full. (Each row's summation order never
// depends on the tiling.)
int64_t gemv_block_rows(int64_t out, int nt) {
  int64_t rb = out / (int64_t(nt) * 8);
  rb = rb / 24 * 24;
  return std::clamp<int64_t>(rb, 24, 240);
}

}  // namespace

int64_t matmul_rowwise_max() {
  return std::min({detail::kernels_scalar().gemv_max_t, detail::kernels_avx2().gemv_max_t,
                   detail::kernels_avx512().gemv_max_t});
}

int64_t matmul_rowwise_rows() { return detail::kernels().gemv_max_t; }

void matmul(const float* x, int64_t T, const Mat& W, const float* bias, float* y) {
  SINKQ_ASSERT(W.data != nullptr && T >= 0 && W.rows >= 0 && W.cols >= 0);
  SINKQ_ASSERT(W.rows <= INT32_MAX && W.cols <= INT32_MAX && T <= INT32_MAX);  // BLAS ints
  const int64_t out = W.rows, in = W.cols;
  if (T == 0 || out == 0) return;
  if (in == 0) {
    for (int64_t t = 0; t < T; ++t)
      for (int64_t r = 0; r < out; ++r) y[t * out + r] = bias ? bias[r] : 0.0f;
    return;
  }
  const KernelTable& k = detail::kernels();
  if (T > k.gemv_max_t) return matmul_sgemm(k, x, T, W, bias, y);
  // ~20 GB/s of weights from DRAM and ~25 GFLOP/s of small-T FMAs per core; a block type's
  // decoding ~0.3 ns a weight (dequant_simd.inc: Q4_K on one Zen 3 core).
  const bool blocks = dtype_is_block(W.dtype);
  const double ns_per_weight = (blocks ? 0.3 : double(dtype_size(W.dtype)) / 20.0) + double(T) / 12.0;
  const int nt = threads_for(double(out) * double(in) * ns_per_weight);
  auto rows = [&](int64_t r0, int64_t r1) {
    if (blocks) return gemv_blocks(k, W, r0, r1, x, T, bias, y);
    k.gemv(W.dtype, W.data, in, r0, r1, x, T, bias, y, out);
  };
  if (nt == 1) return rows(0, out);
  const int64_t rb = gemv_block_rows(out, nt), nblocks = (out + rb - 1) / rb;
  parallel_for(nt, nblocks, 1, [&](int64_t blk, int64_t) { rows(blk * rb, std::min(out, (blk + 1) * rb)); });
}

void rmsnorm(const float* x, const float* w, float* y, int64_t T, int64_t n, float eps) {
  SINKQ_ASSERT(n > 0);
  const KernelTable& k = detail::kernels();
  const int nt = threads_for(0.15 * double(T) * double(n));
  parallel_ranges(nt, T, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const float var = k.sumsq(x + t * n, n) / float(n);
      const float r = 1.0f / std::sqrt(var + eps);  // torch.rsqrt in fp32: 1 / sqrt, both rounded
      k.scale_mul(x + t * n, w, r, y + t * n, n);
    }
  });
}

void embed_rows(const Mat& table, std::span<const int32_t> ids, float* out) {
  SINKQ_ASSERT(table.data != nullptr);
  for (size_t i = 0; i < ids.size(); ++i)
    SINKQ_CHECK(ids[i] >= 0 && ids[i] < table.rows,
                "token id {} (position {}) is outside the vocabulary [0, {}) of {}", ids[i], i,
                table.rows, table.name.empty() ? std::string("the embedding table") : table.name);
  const KernelTable& k = detail::kernels();
  const size_t row_bytes = dtype_row_bytes(table.dtype, table.cols);
  for (size_t i = 0; i < ids.size(); ++i)
    widen(k, table.dtype, static_cast<const char*>(table.data) + size_t(ids[i]) * row_bytes,
          out + i * table.cols, table.cols);
}

void silu_mul(float* g, const float* u, int64_t T, int64_t n) {
  const KernelTable& k = detail::kernels();
  const int64_t total = T * n;
  const int nt = threads_for(0.5 * double(total));
  if (nt == 1) return k.silu_mul(g, u, total);
  parallel_ranges(nt, total, 64, [&](int64_t b, int64_t e) { k.silu_mul(g + b, u + b, e - b); });
}

void gelu_tanh_mul(float* g, const float* u, int64_t T, int64_t n) {
  const int64_t total = T * n;
  const int nt = threads_for(2.0 * double(total));
  parallel_ranges(nt, total, 64, [&](int64_t b, int64_t e) {
    constexpr float c = 0.7978845608028654f;  // sqrt(2 / pi)
    for (int64_t i = b; i < e; ++i) {
      const float x = g[i];
      g[i] = 0.5f * x * (1.0f + std::tanh(c * (x + 0.044715f * x * x * x))) * u[i];
    }
  });
}

void softmax(float* x, int64_t n) {
  if (n <= 0) return;
  const KernelTable& k = detail::kernels();
  const float s = k.exp_shift_sum(x, n);
  k.scale(x, n, 1.0f / s);
}

void attention(const AttnShape& s, const float* q, const float* k_cache, const float* v_cache,
               int64_t n_past, int64_t T, float* out) {
  attention(s, q, KvSegment{}, k_cache, v_cache, n_past, T, out);
}

namespace {

// Prefill (T >= kBlockedAttnMinT): per (block of up to 64 queries, head), the scores of every key
// any query of the block sees, S = scale·Q·Kᵀ, by one single-threaded sgemm per segment (prefix,
// body); then per query row its own visible range is softmaxed (exp_shift_sum, as in the per-row
// path) and the rest of the row zeroed; then O = P·V by sgemm (the body added onto the prefix
// part, beta = 1) and each row scaled by 1/Σ. The same operations as the per-row path in another
// summation order (the dot and weighted-sum bounds of attention_test.cc hold for any order); keys
// a row does not see cost one masked column each (at most 63 per row from the block's diagonal,
// plus the window's slide). Each (block, head) is one task on one thread: the result does not
// depend on the thread count. S is at most kBlockedAttnScratch bytes per thread (fewer queries per
// block at long contexts).
constexpr int64_t kBlockedAttnMinT = 8;
constexpr int64_t kBlockedAttnRows = 64;
constexpr int64_t kBlockedAttnScratch = int64_t(4) << 20;

void attention_blocked(const KernelTable& k, const AttnShape& s, const float* q, const KvSegment& prefix,
                       const float* k_cache, const float* v_cache, int64_t n_past, int64_t T, float* out, int nt) {
  const int H = s.n_heads, D = s.head_dim, group = s.n_heads / s.n_kv_heads;
  const int64_t P = prefix.rows, ldkv = int64_t(s.n_kv_heads) * D, ldq = int64_t(H) * D;
  const float scale = s.score_scale();
  const int64_t keys_max = s.sliding_window ? std::min<int64_t>(P + n_past + T, s.sliding_window + kBlockedAttnRows)
                                            : P + n_past + T;
  const int64_t bq = std::clamp<int64_t>(kBlockedAttnScratch / (4 * keys_max), 1, kBlockedAttnRows);
  const int64_t nblk = (T + bq - 1) / bq;
  // Later blocks see more keys: dynamic hand-out, the last (largest) blocks first.
  parallel_for(nt, nblk * H, 1, [&](int64_t task, int64_t) {
    static thread_local std::vector<float> S, inv;
    const int64_t b = nblk - 1 - task / H;
    const int h = int(task % H), g = h / group;
    const int64_t t0 = b * bq, m = std::min(T, t0 + bq) - t0;
    const int64_t hi_last = P + n_past + t0 + m - 1, lo_first = s.first_visible(P + n_past + t0);
    const int64_t nk = hi_last - lo_first + 1;
    const int64_t np = std::max<int64_t>(0, std::min(P, hi_last + 1) - lo_first);  // prefix columns
    const int64_t nb = nk - np, body0 = std::max(lo_first, P) - P;                  // body columns, first row
    if (S.size() < size_t(m * nk)) S.resize(size_t(m * nk));
    if (inv.size() < size_t(m)) inv.resize(size_t(m));
    const float* qb = q + (t0 * H + h) * D;
    const float* Kp = prefix.k + lo_first * ldkv + int64_t(g) * D;
    const float* Vp = prefix.v + lo_first * ldkv + int64_t(g) * D;
    const float* Kb = k_cache + body0 * ldkv + int64_t(g) * D;
    const float* Vb = v_cache + body0 * ldkv + int64_t(g) * D;
    if (np > 0)
      sgemm_1t(false, true, m, np, D, scale, qb, ldq, Kp, ldkv, 0.0f, S.data(), nk);
    if (nb > 0)
      sgemm_1t(false, true, m, nb, D, scale, qb, ldq, Kb, ldkv, 0.0f, S.data() + np, nk);
    for (int64_t r = 0; r < m; ++r) {
      const int64_t hi = P + n_past + t0 + r, c0 = s.first_visible(hi) - lo_first, c1 = hi - lo_first + 1;
      float* row = S.data() + r * nk;
      std::fill(row, row + c0, 0.0f);
      std::fill(row + c1, row + nk, 0.0f);
      s.cap(row + c0, c1 - c0);
      inv[size_t(r)] = 1.0f / k.exp_shift_sum(row + c0, c1 - c0);
    }
    float* o = out + (t0 * H + h) * D;
    if (np > 0)
      sgemm_1t(false, false, m, D, np, 1.0f, S.data(), nk, Vp, ldkv, 0.0f, o, ldq);
    if (nb > 0)
      sgemm_1t(false, false, m, D, nb, 1.0f, S.data() + np, nk, Vb, ldkv, np > 0 ? 1.0f : 0.0f, o, ldq);
    for (int64_t r = 0; r < m; ++r) k.scale(o + r * ldq, D, inv[size_t(r)]);
  });
}

}  // namespace

void attention(const AttnShape& s, const float* q, const KvSegment& prefix, const float* k_cache,
               const float* v_cache, int64_t n_past, int64_t T, float* out) {
  SINKQ_ASSERT(s.n_heads > 0 && s.n_kv_heads > 0 && s.head_dim > 0 && s.n_heads % s.n_kv_heads == 0);
  SINKQ_ASSERT(n_past >= 0 && T >= 0 && s.sliding_window >= 0 && prefix.rows >= 0);
  const KernelTable& k = detail::kernels();
  const int H = s.n_heads, D = s.head_dim, group = s.n_heads / s.n_kv_heads;
  const int64_t P = prefix.rows;
  const int64_t ldkv = int64_t(s.n_kv_heads) * D;  // cache (and prefix) row stride (floats)
  const float scale = s.score_scale();
  const int64_t pairs = T * H;
  const int64_t max_keys = P + n_past + T;
  // Most keys one query sees.
  const int64_t keys = s.sliding_window ? std::min<int64_t>(max_keys, s.sliding_window) : max_keys;
  const int nt = threads_for(double(pairs) * double(keys) * D * 4.0 / 30.0);  // ~30 GFLOP/s
  if (T >= kBlockedAttnMinT) return attention_blocked(k, s, q, prefix, k_cache, v_cache, n_past, T, out, nt);
  // Decode (and chunks of < 8 queries): per (query token, kv head) the group's query heads
  // together, over the visible keys in chunks of ~16 KiB of K (or V) rows: each chunk is read from
  // L2 / L3 once and reused from L1 by the group's heads (GQA: 3 on SmolLM2, 8 on the 1B shape)
  // instead of once per head. Each head's scores, softmax and sums are its own: per chunk the
  // SIMD dot / weighted-sum kernels, the chunks' sums added left to right, then scaled by 1/Σ.
  const int64_t items = T * s.n_kv_heads;
  const int64_t rows_per_chunk = std::max<int64_t>(8, 16384 / (int64_t(D) * 4));
  const int64_t chunk = std::max<int64_t>(1, items / (int64_t(nt) * 32));
  parallel_for(nt, items, chunk, [&](int64_t p0, int64_t p1) {
    static thread_local std::vector<float> sc;   // scores of the group's heads: [group, n keys]
    static thread_local std::vector<float> acc;  // one chunk's weighted sum: [D]
    static thread_local std::vector<float> inv;  // 1 / softmax sum per head: [group]
    if (sc.size() < size_t(group * keys)) sc.resize(size_t(group * keys));
    if (acc.size() < size_t(D)) acc.resize(size_t(D));
    if (inv.size() < size_t(group)) inv.resize(size_t(group));
    for (int64_t p = p0; p < p1; ++p) {
      const int64_t t = p / s.n_kv_heads;
      const int g = int(p % s.n_kv_heads);
      const int64_t hi = P + n_past + t;  // absolute position of this query
      const int64_t lo = s.first_visible(hi);
      // Visible prefix rows [lo, P) and cache rows [blo, hi - P], in absolute order.
      const int64_t np = std::max<int64_t>(0, P - lo);
      const int64_t blo = std::max<int64_t>(0, lo - P);
      const int64_t nb = hi - P - blo + 1, n = np + nb;
      const float* q0 = q + (t * H + int64_t(g) * group) * D;  // the group's heads, [group, D]
      float* o0 = out + (t * H + int64_t(g) * group) * D;
      // Segments: the prefix's rows, then the cache's, at score columns 0 and np.
      const float* Kseg[2] = {prefix.k + lo * ldkv + int64_t(g) * D, k_cache + blo * ldkv + int64_t(g) * D};
      const float* Vseg[2] = {prefix.v + lo * ldkv + int64_t(g) * D, v_cache + blo * ldkv + int64_t(g) * D};
      const int64_t rows[2] = {np, nb}, col0[2] = {0, np};
      for (int seg = 0; seg < 2; ++seg)
        for (int64_t c = 0; c < rows[seg]; c += rows_per_chunk) {
          const int64_t m = std::min(rows_per_chunk, rows[seg] - c);
          for (int i = 0; i < group; ++i)
            k.scores(q0 + i * D, Kseg[seg] + c * ldkv, ldkv, m, D, scale, sc.data() + i * n + col0[seg] + c);
        }
      for (int i = 0; i < group; ++i) {
        s.cap(sc.data() + i * n, n);
        inv[size_t(i)] = 1.0f / k.exp_shift_sum(sc.data() + i * n, n);
      }
      bool first = true;
      for (int seg = 0; seg < 2; ++seg)
        for (int64_t c = 0; c < rows[seg]; c += rows_per_chunk) {
          const int64_t m = std::min(rows_per_chunk, rows[seg] - c);
          for (int i = 0; i < group; ++i) {
            const float* pr = sc.data() + i * n + col0[seg] + c;
            float* o = o0 + i * D;
            if (first) {
              k.weighted_sum(pr, Vseg[seg] + c * ldkv, ldkv, m, D, 1.0f, o);
              continue;
            }
            k.weighted_sum(pr, Vseg[seg] + c * ldkv, ldkv, m, D, 1.0f, acc.data());
            for (int d = 0; d < D; ++d) o[d] += acc[size_t(d)];
          }
          first = false;
        }
      for (int i = 0; i < group; ++i) k.scale(o0 + i * D, D, inv[size_t(i)]);
    }
  });
}

void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
          const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if (M <= 0 || N <= 0) return;
  // Fixed blocks of 64 rows of C, each one single-threaded sgemm: a row of C is computed by one
  // call whatever the thread count, so the result does not depend on it.
  constexpr int64_t kRows = 64;
  const int64_t nblocks = (M + kRows - 1) / kRows;
  const int nt = detail::threads_for(double(M) * double(N) * double(K) / 25.0);
  parallel_for(nt, nblocks, 1, [&](int64_t b, int64_t) {
    const int64_t r0 = b * kRows, m = std::min(kRows, M - r0);
    const float* a = trans_a ? A + r0 : A + r0 * lda;
    sgemm_1t(trans_a, trans_b, m, N, K, alpha, a, lda, B, ldb, beta, C + r0 * ldc, ldc);
  });
}

}  // namespace sinkq
