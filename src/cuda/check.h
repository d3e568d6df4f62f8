// sinkq/cuda/check.h — the one CUDA-error check of the host side: a failed call becomes a
// sinkq::Error naming it (defined in linear.cc).
#pragma once

#include <cuda_runtime_api.h>

namespace sinkq::cuda::detail {
void check(cudaError_t e, const char* what);
}  // namespace sinkq::cuda::detail
