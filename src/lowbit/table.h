// sinkq/lowbit/table.h — internal: the per-ISA serial kernels behind lowbit/kernels.cc.
//
// Each ISA provides one LowbitTable: the GEMM from the same templated source (gemm_kernels.inc)
// instantiated with that ISA's 16-row integer-dot traits, and the activation quantizer rows.
// The tables are serial; kernels.cc splits work over OpenMP threads. Not part of the public API.
#pragma once

#include <cstdint>

#include "kernels/cpu_features.h"

namespace sinkq::lowbit::detail {

// One GEMM call, everything the serial kernel reads (prepared by kernels.cc).
struct GemmArgs {
  // Weights (KernelWeights layout).
  bool w4 = false;             // 4-bit (8 columns per step) or 8-bit (4 columns per step)
  bool grouped = false;        // per-group scales (else one scale per row: another fp32 order)
  bool asym = false;           // zeros present (per-group 4-bit only)
  const uint8_t* w = nullptr;  // [blocks][steps][64]
  const float* ws = nullptr;   // [blocks][groups][16]
  const int32_t* wz = nullptr; // [blocks][groups][16] or nullptr
  int64_t out = 0;             // rows (output features)
  int64_t steps = 0;           // steps per block
  int64_t groups = 1;          // scales per row (1 for per-row weights)
  int64_t steps_per_group = 0; // full steps per group (per-row: cols / step columns)
  bool tail = false;           // per-row only: one more, partial step (x from xtail)
  // Activations: int8 codes, row stride ldx; the partial last step zero-padded in xtail.
  int64_t T = 0;
  const int8_t* x = nullptr;
  int64_t ldx = 0;
  const uint8_t* xtail = nullptr;  // [T][8]
  const int32_t* xsum = nullptr;   // [T][groups]: Σ of the codes of each group
  const float* xs = nullptr;       // scale of token t: xs[t * xs_stride]
  int64_t xs_stride = 0;
  const float* bias = nullptr;     // [out] or nullptr
  float* y = nullptr;              // [T][out]
};

struct LowbitTable {
  // Rows [16·b0, min(out, 16·b1)) of y for all T tokens.
  void (*gemm)(const GemmArgs& a, int64_t b0, int64_t b1);
  // max over k < n of the bit pattern of |x[k]| (0x7f800000 for inf, above for NaN).
  uint32_t (*absmax_bits)(const float* x, int64_t n);
  // q[k] = quant::detail::level(x[k], s, lo, hi) for k < n (lo = -2^(N-1), hi = 2^(N-1)-1); bits 8:
  // one int8 per byte; bits 4: packed nibbles (formats.h), ceil(n/2) bytes.
  void (*quantize_row)(const float* x, int64_t n, float s, int bits, uint8_t* q);
};

const LowbitTable& table_scalar();
const LowbitTable& table_avx2();
const LowbitTable& table_avx512();  // requires AVX512-VNNI
bool cpu_has_avx512_vnni();
const LowbitTable& table_for(Isa isa);  // Avx512 without VNNI -> the AVX2 table
const LowbitTable& table();             // table_for(active_isa())

}  // namespace sinkq::lowbit::detail
