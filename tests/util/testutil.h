// tests/util/testutil.h — helpers shared by the test binaries.
#pragma once

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <cstring>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"

namespace sinkq::testing {

// Runs f, expects a sinkq::Error and returns its message; any other outcome is a test failure.
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not a sinkq::Error: " << e.what();
    return "";
  }
  ADD_FAILURE() << "no sinkq::Error thrown";
  return "";
}

// ../shared beside the checkout (models, golden outputs, tokenizers, data).
std::string shared_dir();

// A fresh directory under $TMPDIR, removed (recursively) on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// A tiny random-weight HF model directory (config.json + safetensors, optional shards + index).
struct TinyModelSpec {
  std::string architecture = "LlamaForCausalLM";  // | MistralForCausalLM | Qwen2ForCausalLM | any string
  int hidden = 32, intermediate = 48, layers = 2, heads = 4, kv_heads = 2;
  int head_dim = 0;            // 0: omit from config (hidden / heads); else written explicitly
  int vocab = 512, max_pos = 128;
  bool tied = false;
  bool qkv_bias = false;       // written for Qwen2 (always has biases) or Llama attention_bias
  sinkq::DType dtype = sinkq::DType::F32;
  int shards = 1;              // > 1: model-0000k-of-0000n.safetensors + model.safetensors.index.json
  float rope_theta = 10000.0f;
  nlohmann::json rope_scaling = nullptr;  // e.g. {"rope_type":"llama3","factor":8,...}
  int sliding_window = 0;
  uint64_t seed = 1;
  float init_scale = 0.08f;    // weights ~ U(-s, s); norms ~ 1 + U(-0.1, 0.1)
  bool link_tokenizer = true;  // symlink stories260K's tokenizer files into the dir (vocab 512)
};
// Writes config.json, the safetensors file(s) (+ index when sharded) and, if asked, tokenizer
// symlinks into `dir` (which must exist). Deterministic for a given spec.
void write_tiny_model(const std::string& dir, const TinyModelSpec& spec);

// The tensors write_tiny_model writes for `spec`, by HF name: dtype, shape and the exact
// little-endian bytes in the file. Tests compare loaded weights against these.
struct TinyTensor {
  sinkq::DType dtype = sinkq::DType::F32;
  std::vector<int64_t> shape;
  std::vector<std::byte> bytes;
};
std::map<std::string, TinyTensor> tiny_model_tensors(const TinyModelSpec& spec);
// config.json that write_tiny_model writes for `spec`.
nlohmann::json tiny_model_config(const TinyModelSpec& spec);

// Edits the tensor map after it is generated and before it is written (planted weights, see
// util/planted.h): tensors may be changed, added or removed; shapes must stay consistent with the
// config. write_tiny_model(dir, spec) is this with no edit.
using TinyTensorEdit = std::function<void(std::map<std::string, TinyTensor>&)>;
void write_tiny_model(const std::string& dir, const TinyModelSpec& spec, const TinyTensorEdit& edit);

// "" when `doc` is a well-formed XML document (one root element, balanced tags, unique attribute
// names, quoted attribute values, '<' never in text or values, '&' only as a predefined or numeric
// entity), else what is wrong and where. A checker for generated SVG, not a validating parser: no
// DTDs, CDATA is not recognized.
std::string xml_wellformedness_error(std::string_view doc);

// Bytes of a hand-made safetensors file: u64 LE header.size(), header verbatim (no padding, no
// validation), data. For crafting malformed files; tamper with the result as needed.
std::string raw_safetensors(std::string_view header, std::string_view data = {});

// a and b hold the same floats bit for bit (same size, memcmp).
inline bool bit_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}
// max |a - b| / max |b| (in double; the sizes must agree).
inline double rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double d = 0.0, m = 0.0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    d = std::max(d, std::fabs(double(a[i]) - double(b[i])));
    m = std::max(m, std::fabs(double(b[i])));
  }
  return d / m;
}

}  // namespace sinkq::testing
