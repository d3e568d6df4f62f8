// sinkq/cuda/codebook_math.h — how the device decodes a codebook (nuqX) KV row, as plain functions
// the host compiles too: the same values as lowbit::detail::cb_value / the CPU kernels' decode_row
// bit for bit (the level times the scale, plus the zero, each rounded once; an outlier's fp16 value
// in its place; pre-RoPE keys rotated by rope_pair). tests/cuda/codebook_math_test.cc holds them to
// the CPU's values on the host; the device attention (attention_kernels.cu) calls them.
#pragma once

#include <cstdint>

#include "cuda/attention_kernels.h"
#include "cuda/linear_math.h"
#include "cuda/ops_math.h"
#include "formats/nuq_stream.h"

namespace sinkq::cuda::math {

// Column d of kv head g's slice of body row b before its outliers: level · s + z.
SINKQ_HD inline float cb_dense(const detail::CbBodyDev& body, int g, int D, int64_t b, int d) {
  const uint8_t* slice = body.codes + b * body.ld + int64_t(g) * D * body.bits / 8;
  const float l = body.levels[formats::nuq::stream_code(slice, d, body.bits)];
  const int64_t c = int64_t(g) * D + d;
  return body.ch_scale ? add_rn(mul_rn(l, body.ch_scale[c]), body.ch_zero[c])
                       : add_rn(mul_rn(l, body.row_sz[2 * b]), body.row_sz[2 * b + 1]);
}

// Outlier entry e (of row b's [row_ptr[b], row_ptr[b + 1])): its column in kv head g's slice, or -1
// when it belongs to another head; and its value.
SINKQ_HD inline int cb_outlier_col(const detail::CbBodyDev& body, uint32_t e, int g, int D) {
  const int c = int(body.col[e]) - g * D;
  return c >= 0 && c < D ? c : -1;
}
SINKQ_HD inline float cb_outlier_value(const detail::CbBodyDev& body, uint32_t e) { return widen_f16(body.val[e]); }

}  // namespace sinkq::cuda::math
