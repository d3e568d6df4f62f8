// tests/cuda/device/device_util.h — host <-> device copies for the device tests.
#pragma once

#include <algorithm>
#include <vector>

#include "cuda/linear.h"

namespace sinkq::cuda::devtest {

// A buffer holding v (at least one element's bytes, so an empty v still has a valid pointer).
template <class T>
DeviceBuffer to_device(const std::vector<T>& v) {
  DeviceBuffer b(std::max<size_t>(1, v.size()) * sizeof(T));
  if (!v.empty()) b.upload(v.data(), v.size() * sizeof(T));
  return b;
}

template <class T = float>
std::vector<T> from_device(const DeviceBuffer& b, size_t n) {
  std::vector<T> v(n);
  if (n > 0) b.download(v.data(), n * sizeof(T));
  return v;
}

}  // namespace sinkq::cuda::devtest
