// sinkq/formats/nuq_stream.h — the b-bit index stream of a codebook KV row (lowbit/codebook_kv.h):
// index c at bits [c·b, (c+1)·b) of the row, little-endian. One definition for the CPU kernels and
// the device's (SINKQ_HD).
#pragma once

#include <cstdint>

#include "formats/device.h"

namespace sinkq::formats::nuq {

// Index `index` of a stream of `bits`-bit codes (bits <= 8; reads the byte after the code's last
// one, so a buffer keeps at least one byte of slack past its last row).
SINKQ_HD inline uint32_t stream_code(const uint8_t* row, int64_t index, int bits) {
  const int64_t bit = index * bits;
  const uint32_t w = uint32_t(row[bit >> 3]) | uint32_t(row[(bit >> 3) + 1]) << 8;
  return w >> (bit & 7) & ((1u << bits) - 1u);
}

}  // namespace sinkq::formats::nuq
