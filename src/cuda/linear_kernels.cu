// sinkq/cuda/linear_kernels.cu — the device kernels of cuda/linear.h: A8 / A4 activation quantization
// and the packed W8 / W4 linear (decode GEMV; prefill on the int8 tensor cores), bit for bit
// lowbit::quantize_dynamic / quantize_static and lowbit::ref::gemm (the arithmetic is
// cuda/linear_math.h, shared with the host replay test).
//
// Built with -fmad=false -prec-div=true -ftz=false (src/cuda/CMakeLists.txt): a contracted
// multiply-add or an approximate division would change the bits.
#include <cuda_runtime.h>
#include <mma.h>

#include <cfloat>
#include <cstdint>

#include "cuda/linear_kernels.h"
#include "cuda/linear_math.h"
#include "formats/uniform_int.h"

namespace sinkq::cuda::detail {

namespace {

using namespace math;

constexpr unsigned kFull = 0xffffffffu;
constexpr int kQuantThreads = 256;

__global__ void __launch_bounds__(kQuantThreads) quantize_kernel(QuantArgs a) {
  const int64_t t = blockIdx.x;
  const float* x = a.x + t * a.cols;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  float s = a.row_scales ? a.row_scales[t] : a.static_scale;
  if (a.dynamic && !a.row_scales) {
    __shared__ float wmax[kQuantThreads / 32];
    __shared__ float scale;
    float m = 0.0f;
    int bad = 0;
    for (int64_t j = threadIdx.x; j < a.cols; j += blockDim.x) {
      const float v = x[j];
      bad |= !isfinite(v);
      m = fmaxf(m, fabsf(v));  // exact: a max of non-negative values
    }
    for (int off = 16; off > 0; off >>= 1) m = fmaxf(m, __shfl_xor_sync(kFull, m, off));
    if (lane == 0) wmax[warp] = m;
    bad = __syncthreads_or(bad);  // also orders wmax
    if (bad) {
      if (threadIdx.x == 0) atomicMin(reinterpret_cast<unsigned long long*>(a.bad_token), static_cast<unsigned long long>(t));
      return;  // the whole block: bad is the same in every thread
    }
    if (threadIdx.x == 0) {
      float mm = wmax[0];
      for (int w = 1; w < nw; ++w) mm = fmaxf(mm, wmax[w]);
      // lowbit::quantize_dynamic: s = guard((clip · absmax) / (2^(N-1) - 1)), fp32, rounded once each.
      scale = guard_scale(__fdiv_rn(__fmul_rn(a.clip, mm), float((1 << (a.bits - 1)) - 1)));
    }
    __syncthreads();
    s = scale;
  }
  // Codes and the 32-column sums: one warp per 32-column chunk.
  const int64_t nsum = (a.cols + kSumCols - 1) / kSumCols, nchunk = a.ldc / kSumCols;
  for (int64_t k = warp; k < nchunk; k += nw) {
    const int64_t j = k * kSumCols + lane;
    const int c = j < a.cols ? formats::uniform::encode(x[j], s, 0, a.bits, true) : 0;
    a.codes[t * a.ldc + j] = int8_t(c);
    int sum = c;
    for (int off = 16; off > 0; off >>= 1) sum += __shfl_xor_sync(kFull, sum, off);
    if (lane == 0 && k < nsum) a.sums[t * nsum + k] = sum;
  }
  if (threadIdx.x == 0) a.scales[t] = s;
}

__global__ void __launch_bounds__(kQuantThreads) cross_fold_kernel(CrossArgs a) {
  const int64_t t = blockIdx.x;
  const float* x = a.x + t * a.cols;
  float* z = a.z + t * a.cols;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  float mx = 0.0f, mz = 0.0f;
  int bad = 0;
  for (int64_t j = threadIdx.x; j < a.cols; j += blockDim.x) {
    const float v = x[j], zv = __fdiv_rn(v, a.b[j]);
    bad |= !isfinite(v);
    z[j] = zv;
    mx = fmaxf(mx, fabsf(v));
    mz = fmaxf(mz, fabsf(zv));
  }
  for (int off = 16; off > 0; off >>= 1) {
    mx = fmaxf(mx, __shfl_xor_sync(kFull, mx, off));
    mz = fmaxf(mz, __shfl_xor_sync(kFull, mz, off));
  }
  __shared__ float wx[kQuantThreads / 32], wz[kQuantThreads / 32];
  if (lane == 0) wx[warp] = mx, wz[warp] = mz;
  bad = __syncthreads_or(bad);
  if (threadIdx.x == 0) {
    if (bad) {
      atomicMin(reinterpret_cast<unsigned long long*>(a.bad_token), static_cast<unsigned long long>(t));
      return;
    }
    for (int w = 1; w < nw; ++w) wx[0] = fmaxf(wx[0], wx[w]), wz[0] = fmaxf(wz[0], wz[w]);
    a.maxima[2 * t] = wx[0], a.maxima[2 * t + 1] = wz[0];
  }
}

// One thread block per (16-row block b, token t); thread tid takes quarter q = tid % 4 (rows
// 4q..4q+3) of steps tid / 4, tid / 4 + 32, ... (a pass reads 32 consecutive steps, 2 KiB,
// coalesced); U passes make a round, their loads issued before any is used (U 16-byte loads in
// flight per thread). Per-row formats: each thread sums its rows over all its steps, then the
// warp's lanes of one quarter (shuffles) and the warps (shared memory) are added: exact integers.
// Grouped formats (4-bit, groups of 32..256 columns: 4..32 steps, so a pass holds whole groups):
// each round adds its shares into per-(group, row) sums in shared memory, then thread r < 16 folds
// the round's groups into row r's fp32 sum in ascending group order (the CPU's order). U changes
// neither sum nor order: every U gives the same bits.
template <int BITS, bool GROUPED, int U>
__global__ void __launch_bounds__(kThreads) gemv_kernel(GemvArgs a) {
  const int64_t b = blockIdx.x, t = blockIdx.y;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int q = tid & (kQuarters - 1), s0 = tid / kQuarters;
  constexpr int SC = step_cols(BITS);
  const uint8_t* wb = a.codes + b * a.steps * 64;
  const int8_t* xr = a.xcodes + t * a.ldx;
  const int32_t* xs = a.xsums + t * a.nsum;
  // The round starting at step p0 + s0: loads first, then the dots (acc[u][i]: pass u, row 4q + i).
  auto round = [&](int64_t p0, int32_t (&acc)[U][4]) {
    uint4 w4[U];
    uint32_t x_lo[U], x_hi[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t s = p0 + u * kStepsPerPass + s0;
      if (s < a.steps) {
        w4[u] = __ldg(reinterpret_cast<const uint4*>(wb + s * 64 + q * 16));
        x_lo[u] = *reinterpret_cast<const uint32_t*>(xr + s * SC);
        x_hi[u] = BITS == 4 ? *reinterpret_cast<const uint32_t*>(xr + s * SC + 4) : 0u;
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (p0 + u * kStepsPerPass + s0 < a.steps) {
        const uint32_t w[4] = {w4[u].x, w4[u].y, w4[u].z, w4[u].w};
        step_share(BITS, w, x_lo[u], x_hi[u], acc[u]);
      }
    }
  };
  if constexpr (!GROUPED) {
    int32_t acc[U][4] = {};
    for (int64_t p0 = 0; p0 < a.steps; p0 += int64_t(U) * kStepsPerPass) round(p0, acc);
    int32_t tot[4] = {0, 0, 0, 0};
#pragma unroll
    for (int u = 0; u < U; ++u)
      for (int i = 0; i < 4; ++i) tot[i] += acc[u][i];
    for (int off = kQuarters; off < 32; off <<= 1)
      for (int i = 0; i < 4; ++i) tot[i] += __shfl_xor_sync(kFull, tot[i], off);
    __shared__ int32_t part[kThreads / 32][16];
    if (lane < kQuarters)
      for (int i = 0; i < 4; ++i) part[warp][4 * lane + i] = tot[i];
    __syncthreads();
    if (tid < 16) {
      const int64_t row = b * 16 + tid;
      if (row < a.rows) {
        int32_t sum = 0;
        for (int w = 0; w < kThreads / 32; ++w) sum += part[w][tid];
        int32_t xsum = 0;
        if (BITS == 4)
          for (int64_t k = 0; k < a.nsum; ++k) xsum += xs[k];
        const float v = out_per_row(level_sum(BITS, sum, 8, xsum), a.xscales[t], a.wscales[b * 16 + tid]);
        a.y[t * a.rows + row] = with_bias(v, a.bias, row);
      }
    }
  } else {
    const int64_t gcols = a.cols / a.groups;
    const int spg = int(gcols / SC);             // steps per group: 4..32, divides 32 (host-checked)
    const int gpp = kStepsPerPass / spg;         // groups per pass
    const int chunks = int(gcols / kSumCols);    // 32-column sums per group
    const int red = spg < 8 ? spg : 8;           // a warp's steps (8) in one group: all, or spg
    constexpr int kGroupsPerPass = kStepsPerPass / 4;
    __shared__ int32_t gs[U * kGroupsPerPass][16];
    for (int i = tid; i < U * kGroupsPerPass * 16; i += kThreads) (&gs[0][0])[i] = 0;
    __syncthreads();
    float f = 0.0f;
    for (int64_t p0 = 0; p0 < a.steps; p0 += int64_t(U) * kStepsPerPass) {
      int32_t acc[U][4] = {};
      round(p0, acc);
#pragma unroll
      for (int u = 0; u < U; ++u) {
        for (int off = kQuarters; off < kQuarters * red; off <<= 1)
          for (int i = 0; i < 4; ++i) acc[u][i] += __shfl_xor_sync(kFull, acc[u][i], off);
        if (((lane / kQuarters) & (red - 1)) == 0 && p0 + u * kStepsPerPass + s0 < a.steps)
          for (int i = 0; i < 4; ++i) atomicAdd(&gs[u * gpp + s0 / spg][4 * q + i], acc[u][i]);
      }
      __syncthreads();
      if (tid < 16) {
        for (int gi = 0; gi < U * gpp; ++gi) {
          const int64_t g = p0 / spg + gi;
          if (g >= a.groups) break;
          int32_t xsum = 0;
          for (int k = 0; k < chunks; ++k) xsum += xs[g * chunks + k];
          const int64_t pi = (b * a.groups + g) * 16 + tid;
          const int32_t z = a.asymmetric ? a.wzeros[pi] : 8;
          f = fold_group(f, a.wscales[pi], level_sum(4, gs[gi][tid], z, xsum));
          gs[gi][tid] = 0;
        }
      }
      __syncthreads();
    }
    if (tid < 16) {
      const int64_t row = b * 16 + tid;
      if (row < a.rows) a.y[t * a.rows + row] = with_bias(out_grouped(f, a.xscales[t]), a.bias, row);
    }
  }
}

// The tensor-core GEMM (wmma m16n16k16, int8 × int8 → int32). Per round of kTcChunk columns the
// block stages its 64 tokens' codes as As[slab][token][16] and its 16 rows' levels as
// Bs[slab][row][16] (B column-major: element (k, n) at n·16 + k), then warp w multiplies its 16
// tokens by the 16 rows over the 4 slabs. Per-row formats add every slab into one accumulator
// (exact int32), folded once at the end: out_per_row(Σ, s_x, s_w). Grouped formats store and
// fold the accumulator at each group's last column, ascending: f = fold_group(f, s_g, Σ_g), then
// out_grouped(f, s_x) — the GEMV's functions in the GEMV's order, so the same bits.
template <int BITS, bool GROUPED>
__global__ void __launch_bounds__(kThreads) gemm_tc_kernel(GemvArgs a) {
  using namespace nvcuda;
  constexpr int SC = step_cols(BITS), SPC = kTcChunk / SC, kWarps = kThreads / 32;
  static_assert(kWarps * 16 == kTcTokens && kTcChunk == 64, "four warps of 16 tokens, four slabs of 16 columns");
  __shared__ __align__(32) int8_t As[4][kTcTokens][16];
  __shared__ __align__(32) int8_t Bs[4][16][16];
  __shared__ __align__(32) int32_t Cs[kWarps][16][16];
  __shared__ float F[kWarps][16 * 16];
  const int64_t b = blockIdx.x, t0 = int64_t(blockIdx.y) * kTcTokens;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const uint8_t* wb = a.codes + b * a.steps * 64;
  const int gcols = GROUPED ? int(a.cols / a.groups) : 1;  // 32-bit: a 64-bit division is a call
  float* f = F[warp];
  for (int e = lane; e < 256; e += 32) f[e] = 0.0f;
  wmma::fragment<wmma::accumulator, 16, 16, 16, int> acc;
  wmma::fill_fragment(acc, 0);
  const int64_t nchunk = (a.steps * SC + kTcChunk - 1) / kTcChunk;
  for (int64_t ch = 0; ch < nchunk; ++ch) {
    const int64_t k0 = ch * kTcChunk;
    for (int p = tid; p < kTcTokens * 4; p += kThreads) {  // 16-byte pieces: (token, slab)
      const int tt = p / 4, sl = p % 4;
      const int64_t t = t0 + tt;
      int4 v = make_int4(0, 0, 0, 0);
      if (t < a.T) v = *reinterpret_cast<const int4*>(a.xcodes + t * a.ldx + k0 + sl * 16);  // k0 + 64 <= ldx
      *reinterpret_cast<int4*>(&As[sl][tt][0]) = v;
    }
    for (int p = tid; p < SPC * 16; p += kThreads) {  // words: (step of the round, row)
      const int sr = p / 16, r = p % 16;
      const int64_t s = ch * SPC + sr;
      const bool in = s < a.steps;
      const uint32_t w = in ? *reinterpret_cast<const uint32_t*>(wb + s * 64 + 4 * r) : 0u;
      if constexpr (BITS == 8) {
        *reinterpret_cast<uint32_t*>(&Bs[sr / 4][r][(sr % 4) * 4]) = in ? levels_w8(w) : 0u;
      } else {
        const int32_t z = GROUPED && a.asymmetric && in ? a.wzeros[(b * a.groups + int(s) * SC / gcols) * 16 + r] : 8;
        uint32_t lo = 0, hi = 0;
        if (in) levels_w4(w, z, lo, hi);
        uint32_t* dst = reinterpret_cast<uint32_t*>(&Bs[sr / 2][r][(sr % 2) * 8]);
        dst[0] = lo, dst[1] = hi;
      }
    }
    __syncthreads();
#pragma unroll
    for (int sl = 0; sl < 4; ++sl) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, signed char, wmma::row_major> fa;
      wmma::fragment<wmma::matrix_b, 16, 16, 16, signed char, wmma::col_major> fb;
      wmma::load_matrix_sync(fa, &As[sl][warp * 16][0], 16);
      wmma::load_matrix_sync(fb, &Bs[sl][0][0], 16);
      wmma::mma_sync(acc, fa, fb, acc);
      if constexpr (GROUPED) {
        const int kend = int(k0) + (sl + 1) * 16;
        if (kend % gcols == 0 && kend <= a.cols) {  // group kend / gcols − 1 is complete
          const int64_t g = kend / gcols - 1;
          wmma::store_matrix_sync(&Cs[warp][0][0], acc, 16, wmma::mem_row_major);
          __syncwarp();
          for (int e = lane; e < 256; e += 32)
            f[e] = fold_group(f[e], a.wscales[(b * a.groups + g) * 16 + e % 16], Cs[warp][e / 16][e % 16]);
          __syncwarp();
          wmma::fill_fragment(acc, 0);
        }
      }
    }
    __syncthreads();
  }
  if constexpr (!GROUPED) {
    wmma::store_matrix_sync(&Cs[warp][0][0], acc, 16, wmma::mem_row_major);
    __syncwarp();
  }
  for (int e = lane; e < 256; e += 32) {
    const int tt = e / 16, n = e % 16;
    const int64_t t = t0 + warp * 16 + tt, row = b * 16 + n;
    if (t >= a.T || row >= a.rows) continue;
    const float v = GROUPED ? out_grouped(f[e], a.xscales[t])
                            : out_per_row(Cs[warp][tt][n], a.xscales[t], a.wscales[b * 16 + n]);
    a.y[t * a.rows + row] = with_bias(v, a.bias, row);
  }
}

template <int U>
void launch_gemv_u(const GemvArgs& a, dim3 grid, cudaStream_t st) {
  if (a.bits == 8) gemv_kernel<8, false, U><<<grid, kThreads, 0, st>>>(a);
  else if (!a.grouped) gemv_kernel<4, false, U><<<grid, kThreads, 0, st>>>(a);
  else gemv_kernel<4, true, U><<<grid, kThreads, 0, st>>>(a);
}

}  // namespace

void launch_gemm_tc(const GemvArgs& a, void* stream) {
  const dim3 grid(unsigned((a.rows + 15) / 16), unsigned((a.T + kTcTokens - 1) / kTcTokens));
  cudaStream_t st = static_cast<cudaStream_t>(stream);
  if (a.bits == 8) gemm_tc_kernel<8, false><<<grid, kThreads, 0, st>>>(a);
  else if (!a.grouped) gemm_tc_kernel<4, false><<<grid, kThreads, 0, st>>>(a);
  else gemm_tc_kernel<4, true><<<grid, kThreads, 0, st>>>(a);
}

void launch_cross_fold(const CrossArgs& a, void* stream) {
  cross_fold_kernel<<<dim3(unsigned(a.T)), kQuantThreads, 0, static_cast<cudaStream_t>(stream)>>>(a);
}

void launch_quantize(const QuantArgs& a, void* stream) {
  quantize_kernel<<<dim3(unsigned(a.T)), kQuantThreads, 0, static_cast<cudaStream_t>(stream)>>>(a);
}

void launch_gemv(const GemvArgs& a, void* stream) {
  const dim3 grid(unsigned((a.rows + 15) / 16), unsigned(a.T));
  cudaStream_t st = static_cast<cudaStream_t>(stream);
  if (a.unroll == 4) launch_gemv_u<4>(a, grid, st);
  else launch_gemv_u<1>(a, grid, st);
}

}  // namespace sinkq::cuda::detail
