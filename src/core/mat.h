// sinkq/core/mat.h — a type-erased 2-D matrix view, the one matrix type every layer passes.
#pragma once

#include <cstdint>
#include <string>

#include "core/dtype.h"

namespace sinkq {

// Type-erased 2-D matrix view (gemma.cpp's MatPtr idea): row-major, `rows` x `cols`.
struct Mat {
  DType dtype = DType::F32;
  int64_t rows = 0, cols = 0;
  const void* data = nullptr;
  std::string name;  // HF tensor name, for messages
  bool empty() const { return data == nullptr; }
};

}  // namespace sinkq
