// sinkq/perf/bench.cc — see bench.h.
#include "perf/bench.h"

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <span>

#include "core/error.h"
#include "runtime/packed_linear.h"

namespace sinkq::perf {

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

ModelConfig random_config(const std::string& name) {
  ModelConfig c;
  c.architecture = "LlamaForCausalLM";
  c.rms_norm_eps = 1e-5f;
  c.rope_theta = 10000.0f;
  c.bos_token_id = 1;
  c.eos_token_ids = {2};
  if (name == "1b") {  // TinyLlama-1.1B shape
    c.hidden_size = 2048, c.intermediate_size = 5632, c.num_layers = 22, c.num_heads = 32;
    c.num_kv_heads = 4, c.vocab_size = 32000, c.max_position_embeddings = 2048;
  } else if (name == "tiny") {  // for tests of the command itself
    c.hidden_size = 64, c.intermediate_size = 160, c.num_layers = 2, c.num_heads = 4;
    c.num_kv_heads = 2, c.vocab_size = 256, c.max_position_embeddings = 512;
  } else {
    fail("unknown --random shape '{}': expected 1b or tiny", name);
  }
  c.head_dim = c.hidden_size / c.num_heads;
  return c;
}

int64_t proc_status_bytes(const char* key) {
  std::ifstream f("/proc/self/status");
  std::string line;
  const size_t n = std::char_traits<char>::length(key);
  while (std::getline(f, line))
    if (line.compare(0, n, key) == 0) return std::atoll(line.c_str() + n + 1) * 1024;
  return 0;
}
bool reset_peak_rss() {
  std::ofstream f("/proc/self/clear_refs");
  f << "5";
  f.flush();
  return bool(f);
}

int64_t mat_bytes(const Mat& m) { return m.empty() ? 0 : m.rows * int64_t(dtype_row_bytes(m.dtype, m.cols)); }

double kv_row_bytes_of(const Forward& f) {
  const ModelConfig& c = f.model().config();
  return f.kv_store() ? double(f.kv_bytes()) / double(f.kv_store()->capacity())
                      : double(c.num_layers) * 2.0 * double(c.kv_dim()) * 4.0;
}

void weight_bytes(const Model& m, int64_t& decode, int64_t& total) {
  const ModelWeights& w = m.weights();
  const ModelConfig& c = m.config();
  decode = w.lm_head_impl ? int64_t(w.lm_head_impl->bytes()) : mat_bytes(w.lm_head);
  for (const LayerWeights& l : w.layers) {
    for (int i = 0; i < kNumLinearRoles; ++i) {
      const auto* pl = dynamic_cast<const runtime::PackedLinear*>(l.impl_of(i).get());
      decode += pl ? int64_t(pl->bytes()) : mat_bytes(l.mat(i));
    }
  }
  const bool tied = w.tied();
  const int64_t embed = w.embed_impl ? int64_t(w.embed_impl->bytes()) : mat_bytes(w.embed);
  total = decode + (tied ? 0 : embed) +
          int64_t(sizeof(float)) * c.hidden_size * (2 * int64_t(c.num_layers) + 1);
}

Workload make_workload(int64_t V, int64_t np, int64_t nd, int reps) {
  Workload w;
  w.prompt.resize(size_t(np));
  for (int64_t i = 0; i < np; ++i) w.prompt[size_t(i)] = int32_t((i * 7919 + 13) % V);
  w.decode = nd;
  w.reps = reps;
  return w;
}

Timing run(Forward& fwd, const Workload& w) {
  const int64_t V = fwd.model().config().vocab_size;
  std::vector<double> pre, dec;
  for (int r = 0; r < w.reps; ++r) {
    fwd.reset();
    auto t0 = Clock::now();
    fwd.step(w.prompt, /*all_logits=*/false);
    pre.push_back(double(w.prompt.size()) / secs(t0, Clock::now()));
    for (int64_t i = 0; i < w.decode; ++i) {
      const int32_t id = decode_token(i, V);
      auto t1 = Clock::now();
      fwd.step(std::span(&id, 1), /*all_logits=*/false);
      dec.push_back(secs(t1, Clock::now()));
    }
  }
  Timing t;
  t.prefill_tps = median(pre);
  t.decode_ms = dec.empty() ? 0 : 1e3 * median(dec);
  t.decode_tps = dec.empty() ? 0 : 1e3 / t.decode_ms;
  return t;
}

}  // namespace sinkq::perf
