// tests/runtime/runtime_models.h — the models the runtime tests compare the packed path on, each
// loaded once per test binary: the real ../shared models and a tiny Qwen2 written to a temp dir.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "model/model.h"
#include "util/testutil.h"

namespace sinkq::runtime::testmodels {

inline std::string shared_model_dir(const std::string& name) { return testing::shared_dir() + "/models/" + name; }

// ../shared/models/<name> (e.g. "stories260K", "mixtext-2.5M"), loaded once.
inline std::shared_ptr<const Model> shared_model(const std::string& name) {
  static std::map<std::string, std::shared_ptr<const Model>> cache;
  std::shared_ptr<const Model>& m = cache[name];
  if (!m) m = Model::load(shared_model_dir(name));
  return m;
}
inline std::shared_ptr<const Model> stories() { return shared_model("stories260K"); }
inline std::shared_ptr<const Model> mixtext() { return shared_model("mixtext-2.5M"); }

// Qwen2 (q/k/v biases, untied), 2 layers, hidden 128 and intermediate 192: g128 has whole groups
// (q/k/v/o, gate/up) and a ragged 64-column tail (down_proj), g64 and g32 divide everything, and
// it is rotatable (128 = 2^7, 192 = 2^6·3). stories260K's tokenizer files are linked in (vocab
// 512), so the directory is a complete model (artifacts copy its tokenizer).
inline const std::string& tiny_qwen2_dir() {
  static testing::TempDir dir;
  static const bool made = [] {
    testing::TinyModelSpec s;
    s.architecture = "Qwen2ForCausalLM";
    s.hidden = 128;
    s.intermediate = 192;
    s.heads = 4;
    s.kv_heads = 2;
    s.layers = 2;
    s.qkv_bias = true;
    s.init_scale = 0.15f;
    testing::write_tiny_model(dir.path(), s);
    return true;
  }();
  (void)made;
  return dir.path();
}
inline std::shared_ptr<const Model> tiny_qwen2() {
  static const std::shared_ptr<const Model> m = Model::load(tiny_qwen2_dir());
  return m;
}

}  // namespace sinkq::runtime::testmodels
