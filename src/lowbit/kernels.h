// sinkq/lowbit/kernels.h — the integer CPU kernels: activation quantization, load-time weight
// repacking, and the W8A8 / W4A8 / W4A4 GEMV (T = 1) and GEMM (T > 1).
//
// Dispatch: the per-ISA paths (scalar, AVX2, AVX-512 VNNI) follow sinkq::active_isa()
// (SINKQ_ISA=scalar|avx2|avx512, set_isa), re-read on every call. The AVX-512 path needs
// AVX512-VNNI on top of kernels' F+BW+VL; an AVX-512 CPU without it runs the AVX2 path
// (kernel_isa_name() says which path runs).
// Threading: OpenMP over blocks of 16 output features (GEMM) or over tokens (quantization), with
// num_threads() threads (kernels/ops.h); small jobs stay on the calling thread; calls from inside
// a parallel region run single-threaded. Results never depend on the ISA or the thread count.
//
// Exactness. The activation quantizers produce exactly quant::quantize_to_int's codes and
// compute_params' scales (fp32 division, clamp, round half to even; the SIMD rows multiply by
// RN(1/s) and divide only the vectors with a lane near a rounding boundary, which is provably the
// same: table.h). The GEMM accumulates
// integer products exactly in int32 (K <= kMaxCols) and dequantizes in a fixed fp32 order, the
// same in ref::gemm and every ISA, so all paths agree bit for bit:
//   per-row weights:    y = (s_x · s_w) · float(Σ_k c_x c_w) (+ bias)
//   per-group weights:  f = Σ_g s_w,g · float(Σ_{k∈g} c_x (c_w,k + 8 - z_g))  (left to right,
//                       z_g = 8 for symmetric), y = s_x · f (+ bias)
// Against the simulator (fake-quant X and W, fp32 matmul) the difference is fp32 rounding only:
//   |y - y_sim| <= (γ_{K+1} + γ_{G+3})·(Σ_k |x̂_k ŵ_k| + |bias|),  G = groups per row (1 per-row).
//
// VNNI sign handling: vpdpbusd multiplies unsigned bytes by signed bytes. The weights are the
// unsigned operand, stored offset at repack: u = c + 128 (8-bit) or u = c + 8 (4-bit; the
// asymmetric code q itself); the int8 activation codes stay signed and are broadcast straight
// from memory. Σ u·c_x = Σ (u - z) c_x + z·Σ c_x, so every group subtracts z·(Σ_{k∈g} c_x)
// (z = 128 / 8 / the zero point), with the activation group sums computed once per call.
// AVX2 uses the same layout: vpmaddubsw for 4-bit weights (|u·c_x| pairs <= 3840, never
// saturating). For 8-bit weights u·c_x pairs could saturate vpmaddubsw, so it multiplies the
// signed codes c = u ^ 0x80 instead, as vpmaddubsw(|c_x|, sign(c, c_x)): every pair lies in
// [-2·128·128, 2·127·128] (never saturates), and the product is exact except for c = -128 against
// c_x < 0, where vpsignb wraps (-(-128) = -128): that adds 256·c_x, which the kernel subtracts
// again from the few positions repack lists (KernelWeights::neg128).
#pragma once

#include <cstdint>
#include <memory>
#include <new>
#include <string_view>
#include <span>
#include <vector>

#include "formats/quantizer.h"
#include "lowbit/formats.h"

namespace sinkq::lowbit {

// Largest K (= cols of the weights) whose int32 accumulation cannot overflow:
// K·255·128 < 2^31 for the offset 8-bit weights.
inline constexpr int64_t kMaxCols = 65536;

// ---- activation quantization (fp32 -> A8 / A4) --------------------------------------------

// Dynamic per-token (A8_PerToken, A4_PerToken): s_t = max(clip·absmax_t / (2^(N-1)-1), FLT_MIN),
// codes = quantize_to_int under quant_spec(f, clip). Throws sinkq::Error naming the token and
// feature of a non-finite input (as compute_params does). out is resized (capacity reused).
void quantize_dynamic(PackedFormat f, const float* x, int64_t tokens, int64_t cols, float clip_ratio,
                      PackedTensor& out);
// Static per-tensor (A8_PerTensor, A4_PerTensor) with params calibrated for quant_spec(f, clip)
// (compute_params / Calibrator, any clip) on `cols` columns. Non-finite inputs are handled as by
// quantize_to_int (±inf clamp to the range ends, NaN -> the lowest code).
void quantize_static(PackedFormat f, const float* x, int64_t tokens, int64_t cols,
                     const quant::Params& p, PackedTensor& out);

// Per-token (A8_PerToken, A4_PerToken) with the token scales given, scales[tokens] (each a positive
// normal fp32; e.g. CrossQuant's folded token factor, quant/crossquant.h): codes = quantize_to_int
// of each row at its scale. Non-finite inputs as quantize_static.
void quantize_rows(PackedFormat f, const float* x, int64_t tokens, int64_t cols, const float* scales,
                   PackedTensor& out);

// ---- weights, repacked at load time ------------------------------------------------------

// 64-byte aligned storage (one cache line = one kernel step of a 16-row block).
template <class T>
struct Aligned64 {
  using value_type = T;
  Aligned64() = default;
  template <class U>
  Aligned64(const Aligned64<U>&) {}
  T* allocate(size_t n) { return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t(64))); }
  void deallocate(T* p, size_t) { ::operator delete(p, std::align_val_t(64)); }
  friend bool operator==(Aligned64, Aligned64) { return true; }
};

// A weight PackedTensor in the kernels' layout. Rows are taken in blocks of 16 (the last block
// zero-padded); a block is a sequence of 64-byte steps over the columns:
//   8-bit: step s covers columns [4s, 4s+4): byte 4i + j = u(row 16b+i, col 4s+j), u = c + 128;
//   4-bit: step s covers columns [8s, 8s+8): byte 4i + j holds u(row, 8s+j) in its low nibble
//          and u(row, 8s+4+j) in its high nibble, u = c + 8 (symmetric q + 8, asymmetric q).
// So one 512-bit lane (or one 32-bit lane of a 256-bit half) is one row: a 4-column dot per
// vpdpbusd, no horizontal reductions. Padding (rows >= out, columns >= in) is u = 0.
//   scales [blocks][groups][16] fp32; zeros [blocks][groups][16] int32 (asymmetric only).
struct KernelWeights {
  PackedFormat format = PackedFormat::W8_PerRow;
  int64_t rows = 0, cols = 0;
  int64_t groups = 1;          // scales per row
  int64_t steps = 0;           // 64-byte steps per 16-row block: ceil(cols / step columns)
  std::vector<uint8_t, Aligned64<uint8_t>> codes;   // [blocks][steps][64]
  std::vector<float, Aligned64<float>> scales;      // [blocks][groups][16]
  std::vector<int32_t, Aligned64<int32_t>> zeros;   // [blocks][groups][16], asymmetric only
  // 8-bit: where the code -128 is (AVX2 corrects its products, lowbit_avx2.cc): block b's are
  // neg128[neg128_start[b] .. neg128_start[b + 1]), each column << 4 | row in the block, in
  // row-major order; both empty when there is none. Rare: clipped weights only (0.05% of
  // SmolLM2's grid-clipped W8 codes).
  std::vector<uint32_t> neg128_start;  // [blocks + 1] or empty
  std::vector<uint32_t> neg128;
  size_t bytes() const { return codes.size() + 4 * (scales.size() + zeros.size() + neg128_start.size() + neg128.size()); }
};

// Repacks a weight tensor (Role::Weight); throws sinkq::Error for an activation format, cols
// above kMaxCols, or inconsistent arrays.
KernelWeights repack(const PackedTensor& w);

// ---- GEMM ---------------------------------------------------------------------------------

// y[T, out] = x̂[T, in] · ŵ[out, in]^T (+ bias[out] if non-null), fp32, with x any activation
// format (A4 codes are widened to int8 first: there is no 4x4-bit dot product on x86) and w any
// weight format; T = x.rows (T = 1 is the decode GEMV). Throws sinkq::Error on a format or shape
// mismatch. y must not alias anything else.
void gemm(const PackedTensor& x, const KernelWeights& w, const float* bias, float* y);

// Several weight matrices of one format over one activation (q/k/v, gate/up): y_m = x̂ · ŵ_mᵀ
// (+ bias_m), each bit for bit gemm(x, *w_m, bias_m, y_m)'s, with one activation prologue and one
// parallel pass over all their row blocks (one dispatch instead of one per matrix). At most
// kMaxGemmOuts matrices; weights of different formats are a sinkq::Error (call gemm per format).
inline constexpr size_t kMaxGemmOuts = 8;
struct GemmOut {
  const KernelWeights* w = nullptr;
  const float* bias = nullptr;  // [w->rows] or nullptr
  float* y = nullptr;           // [T, w->rows]
};
void gemm_multi(const PackedTensor& x, std::span<const GemmOut> outs);

// The ISA path gemm / quantize_* take now: "scalar", "avx2" or "avx512-vnni".
std::string_view kernel_isa_name();

namespace ref {
// Plain loops on the unpacked formats, in the fp32 order stated above (the definition the fast
// paths are held to, bit for bit).
void gemm(const PackedTensor& x, const PackedTensor& w, const float* bias, float* y);
}  // namespace ref

}  // namespace sinkq::lowbit
