// sinkq/formats/granularity.h — which elements of a matrix share one (scale, zero point).
//
// A plain-data header (no std containers): the quantizer (quantizer.h) and the packed-format
// tables (packed_format.h), which CUDA code includes as well, both name granularities with it.
#pragma once

#include <cstdint>

namespace sinkq::quant {

// Granularities of X[rows, cols]. "Channel" is deliberately not a name here: a weight's channel is
// a row (output channel) but an activation's channel is a column. The values are stored in the
// packed-format tables only through PackedFormat, never on their own, but keep them stable anyway.
enum class Granularity : uint8_t {
  PerTensor,      // all elements                          params [1, 1]
  PerRow,         // row i                                  params [rows, 1]
                  //   weights: per output channel; activations: per token
  PerColumn,      // column j, all rows                     params [1, cols]
                  //   activations: per channel (e.g. KVQuant's per-channel Keys)
  PerGroup,       // row i, columns [g·G, (g+1)·G), G = group_size     params [rows, cols/G]
                  //   weights: "g128" group-wise quantization along the input dimension
  PerHead,        // row i, columns of head h (G = head_dim)            params [rows, cols/head_dim]
                  //   per-token-per-head (dynamic KV cache quantization)
  PerHeadShared,  // columns of head h, all rows                        params [1, cols/head_dim]
                  //   one scale per head for every token (PrefixQuant's static per-head KV)
};

}  // namespace sinkq::quant
