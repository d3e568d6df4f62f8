// sinkq/cuda/attention_kernels.cu — causal GQA attention over [fp32 prefix; packed int8 / int4 KV
// body] on the device (cuda/attention.h), flash-decoding style: every (token, kv head, split of
// kAttnSplitRows visible keys) is a thread block that scores its keys for the GQA group's query
// heads, softmaxes them against their own maximum and writes (max, sum, weighted sum); a second
// kernel merges the splits of each (token, head) in split order. Deterministic: no atomics, the
// same order whatever the device.
//
// The scores and sums follow the CPU's formulas (lowbit/kv_kernels.h): prefix keys scale·(q·k);
// body keys scale·(s_j·Σ_d q_d·l_jd) with l_jd = c_jd - (z_j - offset) an exact small integer;
// values Σ_j (p_j·s_j)·l_jd. Each product and sum is rounded once (-fmad=false); the orders
// differ from the CPU's, so the device is held to the double oracle within a derived bound
// (tests/cuda/device/attention_device_test.cc), as the CPU ISAs are.
#include <cuda_runtime.h>

#include <cfloat>
#include <cmath>
#include <cstdint>

#include "cuda/attention_kernels.h"
#include "cuda/codebook_math.h"
#include "cuda/linear_math.h"
#include "formats/uniform_int.h"

namespace sinkq::cuda::detail {

namespace {

using math::add_rn;
using math::guard_scale;
using math::mul_rn;

constexpr unsigned kFull = 0xffffffffu;
constexpr int kThreads = 128;

// Level of column d of kv head g's slice of body row j, and the row's scale.
__device__ inline float level(const KvBodyDev& b, int g, int D, int64_t j, int d) {
  const uint8_t* row = b.codes + j * b.ld + int64_t(g) * D * b.bits / 8;
  const int zc = b.zero ? int(b.zero[j * b.ls + g * b.head_step]) - (1 << (b.bits - 1)) : 0;
  return float(formats::uniform::code_at(row, d, b.bits) - zc);
}
__device__ inline float row_scale(const KvBodyDev& b, int g, int64_t j) { return b.scale[j * b.ls + g * b.head_step]; }

__device__ inline float warp_max(float v) {
  for (int off = 16; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(kFull, v, off));
  return v;
}
__device__ inline float warp_sum(float v) {
  for (int off = 16; off > 0; off >>= 1) v = add_rn(v, __shfl_xor_sync(kFull, v, off));
  return v;
}

// Each head's scores sc[i·kAttnSplitRows + r], r < n, become exp(score − max) in place (one warp a
// head); mx / sum get the split's max and Σ exp. Ends with a barrier.
__device__ inline void split_softmax(float* sc, int n, int G, float* mx, float* sum) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int i = warp; i < G; i += kThreads / 32) {
    float* row = sc + i * kAttnSplitRows;
    float m = -INFINITY;
    for (int r = lane; r < n; r += 32) m = fmaxf(m, row[r]);
    m = warp_max(m);
    float l = 0.0f;
    for (int r = lane; r < n; r += 32) {
      const float p = expf(row[r] - m);
      row[r] = p;
      l = add_rn(l, p);
    }
    l = warp_sum(l);
    if (lane == 0) mx[i] = m, sum[i] = l;
  }
  __syncthreads();
}

__global__ void __launch_bounds__(kThreads) attn_partial(AttnArgs a) {
  extern __shared__ float smem[];
  const int H = a.n_heads, Hkv = a.n_kv_heads, D = a.head_dim, G = H / Hkv;
  constexpr int R = kAttnSplitRows;
  const int split = blockIdx.x;
  const int64_t t = blockIdx.y / Hkv;
  const int g = int(blockIdx.y % Hkv);
  float* qs = smem;          // the group's q rows [G][D]
  float* sc = smem + G * D;  // scores, then exp(score - max) [G][R]
  __shared__ float mx[kAttnMaxHeads], sum[kAttnMaxHeads];
  const int64_t hi = a.P + a.n_past + t;  // this query's absolute position
  const int64_t lo = a.window > 0 && hi - a.window + 1 > 0 ? hi - a.window + 1 : 0;
  const int64_t a0 = lo + int64_t(split) * R;
  const int n = a0 > hi ? 0 : int(hi + 1 - a0 < R ? hi + 1 - a0 : R);
  float* part = a.part + ((t * Hkv + g) * a.nsplit + split) * int64_t(G) * (D + 2);
  if (n == 0) {  // a split past this token's keys: an empty partial
    for (int i = threadIdx.x; i < G; i += blockDim.x) part[i * (D + 2)] = -INFINITY, part[i * (D + 2) + 1] = 0.0f;
    return;
  }
  for (int idx = threadIdx.x; idx < G * D; idx += blockDim.x) qs[idx] = a.q[(t * H + int64_t(g) * G) * D + idx];
  __syncthreads();
  for (int idx = threadIdx.x; idx < G * n; idx += blockDim.x) {
    const int i = idx / n, r = idx % n;
    const int64_t j = a0 + r;
    const float* qi = qs + i * D;
    float acc = 0.0f, s;
    if (j < a.P) {
      const float* k = a.pk + (j * Hkv + g) * D;
      for (int d = 0; d < D; ++d) acc = add_rn(acc, mul_rn(qi[d], k[d]));
      s = mul_rn(a.scale, acc);
    } else {
      const int64_t b = j - a.P;
      for (int d = 0; d < D; ++d) acc = add_rn(acc, mul_rn(qi[d], level(a.k, g, D, b, d)));
      s = mul_rn(a.scale, mul_rn(row_scale(a.k, g, b), acc));
    }
    if (a.softcap > 0.0f) s = mul_rn(a.softcap, tanhf(s / a.softcap));
    sc[i * R + r] = s;
  }
  __syncthreads();
  split_softmax(sc, n, G, mx, sum);
  for (int idx = threadIdx.x; idx < G * D; idx += blockDim.x) {
    const int i = idx / D, d = idx % D;
    float acc = 0.0f;
    for (int r = 0; r < n; ++r) {
      const int64_t j = a0 + r;
      const float p = sc[i * R + r];
      if (j < a.P) {
        acc = add_rn(acc, mul_rn(p, a.pv[(j * Hkv + g) * D + d]));
      } else {
        const int64_t b = j - a.P;
        acc = add_rn(acc, mul_rn(mul_rn(p, row_scale(a.v, g, b)), level(a.v, g, D, b, d)));
      }
    }
    part[i * (D + 2) + 2 + d] = acc;
  }
  for (int i = threadIdx.x; i < G; i += blockDim.x) part[i * (D + 2)] = mx[i], part[i * (D + 2) + 1] = sum[i];
}

// The split partials of every (token, kv head): part [T, n_kv_heads, nsplit, group, head_dim + 2].
struct Partials {
  int n_heads = 0, n_kv_heads = 0, head_dim = 0, nsplit = 0;
  const float* part = nullptr;
  float* out = nullptr;
};

// out[t, h, :] = Σ_s e^{m_s - M}·acc_s / Σ_s e^{m_s - M}·l_s over the splits in order (M = max m_s).
__global__ void __launch_bounds__(kThreads) attn_combine(Partials a) {
  const int H = a.n_heads, Hkv = a.n_kv_heads, D = a.head_dim, G = H / Hkv;
  const int64_t t = blockIdx.x / H;
  const int h = int(blockIdx.x % H), g = h / G, i = h % G;
  const float* base = a.part + (t * Hkv + g) * a.nsplit * int64_t(G) * (D + 2) + int64_t(i) * (D + 2);
  const int64_t stride = int64_t(G) * (D + 2);  // between splits
  float M = -INFINITY;
  for (int s = 0; s < a.nsplit; ++s) M = fmaxf(M, base[s * stride]);
  float L = 0.0f;
  for (int s = 0; s < a.nsplit; ++s)
    if (base[s * stride + 1] > 0.0f) L = add_rn(L, mul_rn(expf(base[s * stride] - M), base[s * stride + 1]));
  for (int d = threadIdx.x; d < D; d += blockDim.x) {
    float o = 0.0f;
    for (int s = 0; s < a.nsplit; ++s)
      if (base[s * stride + 1] > 0.0f) o = add_rn(o, mul_rn(expf(base[s * stride] - M), base[s * stride + 2 + d]));
    a.out[(t * H + h) * D + d] = o / L;
  }
}

// The codebook body (KVQuant's nuqX): like attn_partial, but body rows are decoded kCbChunkRows at
// a time into shared memory — dense values (codebook_math.h cb_dense), then the row's outliers of
// this head patched in, then (pre-RoPE keys) rotated by their cos | sin row — and dotted from
// there. Values: Σ_r p_r·v̂_r over the split's rows in order.
__global__ void __launch_bounds__(kThreads) attn_partial_cb(CbAttnArgs a) {
  extern __shared__ float smem[];
  const int H = a.n_heads, Hkv = a.n_kv_heads, D = a.head_dim, G = H / Hkv, half = D / 2;
  constexpr int R = kAttnSplitRows, C = kCbChunkRows;
  const int LB = D + 1;  // buf's row stride: rows read at one column by a warp fall in distinct banks
  const int split = blockIdx.x;
  const int64_t t = blockIdx.y / Hkv;
  const int g = int(blockIdx.y % Hkv);
  float* qs = smem;              // [G][D] the group's q rows (prefix keys)
  float* qb = qs + G * D;        // [G][D] the same in the body keys' basis
  float* sc = qb + G * D;        // [G][R] scores, then exp(score - max)
  float* acc = sc + G * R;       // [G][D] the weighted sums
  float* buf = acc + G * D;      // [C][D + 1] decoded body rows
  __shared__ float mx[kAttnMaxHeads], sum[kAttnMaxHeads];
  const int64_t hi = a.P + a.n_past + t;
  const int64_t lo = a.window > 0 && hi - a.window + 1 > 0 ? hi - a.window + 1 : 0;
  const int64_t a0 = lo + int64_t(split) * R;
  const int n = a0 > hi ? 0 : int(hi + 1 - a0 < R ? hi + 1 - a0 : R);
  float* part = a.part + ((t * Hkv + g) * a.nsplit + split) * int64_t(G) * (D + 2);
  if (n == 0) {
    for (int i = threadIdx.x; i < G; i += blockDim.x) part[i * (D + 2)] = -INFINITY, part[i * (D + 2) + 1] = 0.0f;
    return;
  }
  const float* qsrc = a.q_body ? a.q_body : a.q;
  for (int idx = threadIdx.x; idx < G * D; idx += blockDim.x) {
    qs[idx] = a.q[(t * H + int64_t(g) * G) * D + idx];
    qb[idx] = qsrc[(t * H + int64_t(g) * G) * D + idx];
    acc[idx] = 0.0f;
  }
  __syncthreads();
  const int np = a0 >= a.P ? 0 : int(a.P - a0 < n ? a.P - a0 : n);  // the split's prefix rows come first
  const auto capped = [&](float s) { return a.softcap > 0.0f ? mul_rn(a.softcap, tanhf(s / a.softcap)) : s; };
  for (int idx = threadIdx.x; idx < G * np; idx += blockDim.x) {
    const int i = idx / np, r = idx % np;
    const float* k = a.pk + ((a0 + r) * Hkv + g) * D;
    float dot = 0.0f;
    for (int d = 0; d < D; ++d) dot = add_rn(dot, mul_rn(qs[i * D + d], k[d]));
    sc[i * R + r] = capped(mul_rn(a.scale, dot));
  }
  __syncthreads();  // a split of prefix rows only has no chunk barrier before the softmax
  // Rows [r0, r0 + c) of the split, all in the body, decoded into buf.
  const auto decode = [&](const CbBodyDev& body, int r0, int c, bool rope) {
    for (int e = threadIdx.x; e < c * D; e += blockDim.x) {
      const int r = e / D, d = e % D;
      buf[r * LB + d] = math::cb_dense(body, g, D, a0 + r0 + r - a.P, d);
    }
    __syncthreads();
    for (int r = threadIdx.x; r < c; r += blockDim.x) {
      const int64_t b = a0 + r0 + r - a.P;
      for (uint32_t e = body.row_ptr[b]; e < body.row_ptr[b + 1]; ++e) {
        const int col = math::cb_outlier_col(body, e, g, D);
        if (col >= 0) buf[r * LB + col] = math::cb_outlier_value(body, e);
      }
    }
    __syncthreads();
    if (!rope) return;
    for (int e = threadIdx.x; e < c * half; e += blockDim.x) {
      const int r = e / half, i = e % half;
      const float* row = a.cs + (a0 + r0 + r - a.P) * D;
      math::rope_pair(buf[r * LB + i], buf[r * LB + half + i], row[i], row[half + i]);
    }
    __syncthreads();
  };
  for (int r0 = np; r0 < n; r0 += C) {
    const int c = n - r0 < C ? n - r0 : C;
    decode(a.k, r0, c, a.cs != nullptr);
    for (int idx = threadIdx.x; idx < G * c; idx += blockDim.x) {
      const int i = idx / c, r = idx % c;
      float dot = 0.0f;
      for (int d = 0; d < D; ++d) dot = add_rn(dot, mul_rn(qb[i * D + d], buf[r * LB + d]));
      sc[i * R + r0 + r] = capped(mul_rn(a.scale, dot));
    }
    __syncthreads();
  }
  split_softmax(sc, n, G, mx, sum);
  for (int idx = threadIdx.x; idx < G * D; idx += blockDim.x) {
    const int i = idx / D, d = idx % D;
    float o = 0.0f;
    for (int r = 0; r < np; ++r) o = add_rn(o, mul_rn(sc[i * R + r], a.pv[((a0 + r) * Hkv + g) * D + d]));
    acc[idx] = o;
  }
  for (int r0 = np; r0 < n; r0 += C) {
    const int c = n - r0 < C ? n - r0 : C;
    decode(a.v, r0, c, false);  // its first barrier also orders the prefix sums above
    for (int idx = threadIdx.x; idx < G * D; idx += blockDim.x) {
      const int i = idx / D, d = idx % D;
      float o = acc[idx];
      for (int r = 0; r < c; ++r) o = add_rn(o, mul_rn(sc[i * R + r0 + r], buf[r * LB + d]));
      acc[idx] = o;
    }
    __syncthreads();
  }
  for (int idx = threadIdx.x; idx < G * D; idx += blockDim.x) part[(idx / D) * (D + 2) + 2 + idx % D] = acc[idx];
  for (int i = threadIdx.x; i < G; i += blockDim.x) part[i * (D + 2)] = mx[i], part[i * (D + 2) + 1] = sum[i];
}

__device__ inline float block_reduce(float v, bool is_max, float* red) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int off = 16; off > 0; off >>= 1) {
    const float o = __shfl_xor_sync(kFull, v, off);
    v = is_max ? fmaxf(v, o) : fminf(v, o);
  }
  __syncthreads();  // red is reused between calls
  if (lane == 0) red[warp] = v;
  __syncthreads();
  v = red[0];
  for (int w = 1; w < kThreads / 32; ++w) v = is_max ? fmaxf(v, red[w]) : fminf(v, red[w]);
  return v;
}

// The codes of a span of n values under (s, z), packed as uniform_int.h's rows (the block's threads).
__device__ inline void write_codes(const float* x, int n, float s, int z, int bits, bool symmetric, uint8_t* dst) {
  if (bits == 8) {
    for (int j = threadIdx.x; j < n; j += blockDim.x) dst[j] = uint8_t(formats::uniform::encode(x[j], s, z, 8, symmetric));
  } else {  // two codes a byte, the even column low (n is even: checked by the cache)
    for (int j = threadIdx.x; j < n / 2; j += blockDim.x)
      dst[j] = formats::uniform::pack_nibbles(formats::uniform::encode(x[2 * j], s, z, 4, symmetric),
                                              formats::uniform::encode(x[2 * j + 1], s, z, 4, symmetric));
  }
}

__global__ void __launch_bounds__(kThreads) kv_store(KvStoreArgs a) {
  __shared__ float red[kThreads / 32];
  const int spans = a.per_head ? a.kv_heads : 1;
  const int64_t i = blockIdx.x / spans;  // the row within the call
  const int span = int(blockIdx.x % spans);
  const int64_t C = int64_t(a.kv_heads) * a.head_dim;
  const int n = a.per_head ? a.head_dim : int(C);  // the span's columns
  const float* x = a.x + i * C + int64_t(span) * n;
  const int64_t row = a.row0 + i;
  const int64_t rb = C * a.bits / 8;
  uint8_t* dst = a.codes + row * rb + int64_t(span) * n * a.bits / 8;
  if (a.fixed) {  // a static format: the calibrated (scale, zero) of this span; codes only
    write_codes(x, n, a.scales[span], a.symmetric ? 0 : int(a.zeros[span]), a.bits, a.symmetric, dst);
    return;
  }
  float lo = 0.0f, hi = 0.0f;  // every range holds 0 (quant::Calibrator)
  int bad = 0;
  for (int j = threadIdx.x; j < n; j += blockDim.x) {
    const float v = x[j];
    bad |= !isfinite(v);
    if (a.symmetric) hi = fmaxf(hi, fabsf(v));
    else lo = fminf(lo, v), hi = fmaxf(hi, v);
  }
  if (__syncthreads_or(bad)) {
    if (threadIdx.x == 0) atomicMin(reinterpret_cast<unsigned long long*>(a.bad_row), static_cast<unsigned long long>(i));
    return;
  }
  hi = block_reduce(hi, true, red);
  if (!a.symmetric) lo = block_reduce(lo, false, red);
  float s;
  int z = 0;
  if (a.symmetric) {
    s = guard_scale(__fdiv_rn(hi, float((1 << (a.bits - 1)) - 1)));  // clip 1: clip·absmax = absmax
  } else {
    const float denom = float((1 << a.bits) - 1);
    s = guard_scale(__fdiv_rn(__fsub_rn(hi, lo), denom));
    z = int(rintf(fminf(fmaxf(__fdiv_rn(-lo, s), 0.0f), denom)));
  }
  const int64_t pos = row * spans + span;
  write_codes(x, n, s, z, a.bits, a.symmetric, dst);
  if (threadIdx.x == 0) {
    a.scales[pos] = s;
    if (!a.symmetric) a.zeros[pos] = uint8_t(z);
  }
}

}  // namespace

void launch_kv_store(const KvStoreArgs& a, void* stream) {
  const int spans = a.per_head ? a.kv_heads : 1;
  kv_store<<<dim3(unsigned(a.T * spans)), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(a);
}

void launch_attention(const AttnArgs& a, void* stream) {
  cudaStream_t st = static_cast<cudaStream_t>(stream);
  const int G = a.n_heads / a.n_kv_heads;
  const size_t smem = size_t(G) * (a.head_dim + kAttnSplitRows) * sizeof(float);
  attn_partial<<<dim3(unsigned(a.nsplit), unsigned(a.T * a.n_kv_heads)), kThreads, smem, st>>>(a);
  attn_combine<<<dim3(unsigned(a.T * a.n_heads)), kThreads, 0, st>>>(
      Partials{a.n_heads, a.n_kv_heads, a.head_dim, a.nsplit, a.part, a.out});
}

size_t attention_codebook_smem(int group, int head_dim) {
  return size_t(3 * group * head_dim + group * kAttnSplitRows + kCbChunkRows * (head_dim + 1)) * sizeof(float);
}

void launch_attention_codebook(const CbAttnArgs& a, void* stream) {
  cudaStream_t st = static_cast<cudaStream_t>(stream);
  const size_t smem = attention_codebook_smem(a.n_heads / a.n_kv_heads, a.head_dim);
  // Above 48 KB a block must opt in; if that fails, the launch is skipped and the caller's
  // cudaGetLastError() reports why.
  if (smem > 48 * 1024 &&
      cudaFuncSetAttribute(attn_partial_cb, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)) != cudaSuccess)
    return;
  attn_partial_cb<<<dim3(unsigned(a.nsplit), unsigned(a.T * a.n_kv_heads)), kThreads, smem, st>>>(a);
  attn_combine<<<dim3(unsigned(a.T * a.n_heads)), kThreads, 0, st>>>(
      Partials{a.n_heads, a.n_kv_heads, a.head_dim, a.nsplit, a.part, a.out});
}

}  // namespace sinkq::cuda::detail
