// sinkq/core/gguf_quants.h — scalar reference dequantization of llama.cpp / ggml tensor types.
//
// Supported ggml type ids: F32 (0), F16 (1), Q4_0 (2), Q4_1 (3), Q5_0 (6), Q5_1 (7), Q8_0 (8),
// Q2_K (10), Q3_K (11), Q4_K (12), Q5_K (13), Q6_K (14), BF16 (30). The block layouts are written
// out above each block struct in gguf_quants.cc. Every value is computed in fp32 in the same
// operation order as ggml's dequantize_row_* and gguf-py's gguf.quants.dequantize, so the results
// equal theirs bit for bit (tests/io/gguf_quants_test.cc checks this against gguf-py fixtures).
//
// One scalar loop per type, no SIMD, no threads: a reference, and fast enough to widen a model
// once at load. Blocks are independent, so a caller may dequantize rows (or any block-aligned
// ranges) in parallel.
#pragma once

#include <cstdint>
#include <string>

namespace sinkq {

// Dequantizes n elements of ggml type id `type` from src into dst (fp32). src holds
// n / block_size blocks of the type, packed, in ggml's little-endian layout (no alignment
// needed). n must be >= 0 and a multiple of the type's block size (1 for F32/F16/BF16, 32 for
// Q4_0..Q8_0, 256 for the K-quants); otherwise sinkq::Error naming `what` (e.g. the tensor).
// An unsupported type id is a sinkq::Error naming `what` and the type (id and ggml name).
void gguf_dequantize(uint32_t type, const void* src, float* dst, int64_t n, const std::string& what);

// True for the type ids gguf_dequantize accepts.
bool gguf_can_dequantize(uint32_t type);

// The sixteen 6-bit Q3_K scales from its 12 packed scale bytes S, still biased by +32
// (gguf_quants.cc's BlockQ3_K layout).
inline void gguf_q3k_scales(const uint8_t* S, int (&sc)[16]) {
  for (int s = 0; s < 16; ++s) {
    const int low = s < 8 ? (S[s] & 15) : (S[s - 8] >> 4);
    const int high = (S[8 + s % 4] >> (2 * (s / 4))) & 3;
    sc[s] = low | (high << 4);
  }
}

// Scale and min of sub-block s (0..7) of a Q4_K / Q5_K block from its 12 packed scale bytes S
// (the "k4" 6-bit packing, gguf_quants.cc's BlockQ4_K): shared by the reference and the SIMD
// dequantizers (kernels/dequant_simd.inc).
inline void gguf_k4_scale_min(const uint8_t* S, int s, int& sc, int& mn) {
  if (s < 4) {
    sc = S[s] & 63;
    mn = S[s + 4] & 63;
  } else {
    sc = (S[s + 4] & 15) | ((S[s - 4] >> 6) << 4);
    mn = (S[s + 4] >> 4) | ((S[s] >> 6) << 4);
  }
}

}  // namespace sinkq
