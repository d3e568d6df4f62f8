// tests/util/model_testutil.h — helpers for tests that run a Forward (binaries linking sinkq_model).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "model/model.h"
#include "util/testutil.h"

namespace sinkq::testing {

// A fixed prompt of ordinary token ids for the 512-token vocabularies of the test models
// (stories260K, mixtext-2.5M, write_tiny_model): BOS = 1, then 3 + (37·i + 101·salt) mod 500.
inline std::vector<int32_t> prompt(int n, int salt = 0) {
  std::vector<int32_t> t{1};
  for (int i = 1; i < n; ++i) t.push_back(int32_t(3 + (i * 37 + salt * 101) % 500));
  return t;
}

// n such prompts of len tokens, salts 1..n (calibration samples in the quant and runtime tests).
inline std::vector<std::vector<int32_t>> prompts(int n, int len) {
  std::vector<std::vector<int32_t>> s;
  for (int i = 0; i < n; ++i) s.push_back(prompt(len, i + 1));
  return s;
}

// stories260K from ../shared/models, loaded once per test binary.
inline std::shared_ptr<const Model> stories260k() {
  static const std::shared_ptr<const Model> m = Model::load(shared_dir() + "/models/stories260K");
  return m;
}

// The logits of every token of `toks`, run from an empty body (f.reset() keeps a prefix).
inline std::vector<float> logits_of(Forward& f, const std::vector<int32_t>& toks) {
  f.reset();
  const auto l = f.step(toks, true);
  return {l.begin(), l.end()};
}

}  // namespace sinkq::testing
