// sinkq/cuda/linear_kernels.cu — the device kernels of cuda/linear.h: A8 activation quantization
// and the packed W8 / W4 linear (decode GEMV; T tokens as T thread-block rows), bit for bit
// lowbit::quantize_dynamic / quantize_static and lowbit::ref::gemm (the arithmetic is
// cuda/linear_math.h, shared with the host replay test).
//
// Built with -fmad=false -prec-div=true -ftz=false (src/cuda/CMakeLists.txt): a contracted
// multiply-add or an approximate division would change the bits.
#include <cuda_runtime.h>

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

__global__ void __launch_bounds__(kQuantThreads) quantize_a8_kernel(QuantArgs a) {
  const int64_t t = blockIdx.x;
  const float* x = a.x + t * a.cols;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  float s = a.static_scale;
  if (a.dynamic) {
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
      scale = guard_scale(__fdiv_rn(__fmul_rn(a.clip, mm), 127.0f));
    }
    __syncthreads();
    s = scale;
  }
  // Codes and the 32-column sums: one warp per 32-column chunk.
  const int64_t nsum = (a.cols + kSumCols - 1) / kSumCols, nchunk = a.ldc / kSumCols;
  for (int64_t k = warp; k < nchunk; k += nw) {
    const int64_t j = k * kSumCols + lane;
    const int c = j < a.cols ? formats::uniform::encode(x[j], s, 0, 8, true) : 0;
    a.codes[t * a.ldc + j] = int8_t(c);
    int sum = c;
    for (int off = 16; off > 0; off >>= 1) sum += __shfl_xor_sync(kFull, sum, off);
    if (lane == 0 && k < nsum) a.sums[t * nsum + k] = sum;
  }
  if (threadIdx.x == 0) a.scales[t] = s;
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

template <int U>
void launch_gemv_u(const GemvArgs& a, dim3 grid, cudaStream_t st) {
  if (a.bits == 8) gemv_kernel<8, false, U><<<grid, kThreads, 0, st>>>(a);
  else if (!a.grouped) gemv_kernel<4, false, U><<<grid, kThreads, 0, st>>>(a);
  else gemv_kernel<4, true, U><<<grid, kThreads, 0, st>>>(a);
}

}  // namespace

void launch_quantize_a8(const QuantArgs& a, void* stream) {
  quantize_a8_kernel<<<dim3(unsigned(a.T)), kQuantThreads, 0, static_cast<cudaStream_t>(stream)>>>(a);
}

void launch_gemv(const GemvArgs& a, void* stream) {
  const dim3 grid(unsigned((a.rows + 15) / 16), unsigned(a.T));
  cudaStream_t st = static_cast<cudaStream_t>(stream);
  if (a.unroll == 4) launch_gemv_u<4>(a, grid, st);
  else launch_gemv_u<1>(a, grid, st);
}

}  // namespace sinkq::cuda::detail
