// sinkq/kernels/membw.h — a main-memory read-bandwidth probe, for benchmark reports.
//
// Decode is bound by streaming the weights once per token, so tokens/s is best read against the
// machine's achievable read bandwidth: bytes of weights per token * tokens/s / measured GB/s.
#pragma once

#include <cstddef>

#include "kernels/ops.h"

namespace sinkq {

// Best-of-5 read bandwidth in GB/s (1e9 bytes/s): `threads` OpenMP threads each sum their slice
// of a `bytes`-sized fp32 buffer with the active ISA's vector code. Pick `bytes` well above the
// last-level cache (the default 1 GiB is). Allocates and frees the buffer on every call.
double measure_read_bandwidth_gbs(size_t bytes = size_t(1) << 30, int threads = num_threads());

}  // namespace sinkq
