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

}  // namespace sinkq
