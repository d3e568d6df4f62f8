// tests/train/tiny_config.h — the tiny model shape the gradient tests check against finite
// differences: 2 layers, GQA 4:2, q/k/v biases, optional llama3 RoPE scaling and sliding window.
#pragma once

#include "io/config.h"

namespace sinkq::train {

inline ModelConfig tiny_config(bool llama3, int window) {
  ModelConfig c;
  c.architecture = "Qwen2ForCausalLM";
  c.arch = Arch::Qwen2;
  c.hidden_size = 16;
  c.intermediate_size = 24;
  c.num_layers = 2;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 4;
  c.vocab_size = 40;
  c.max_position_embeddings = 64;
  c.rms_norm_eps = 1e-6f;
  c.qkv_bias = true;
  c.sliding_window = window;
  if (llama3) {
    c.rope_scaling.type = "llama3";
    c.rope_scaling.factor = 8.0f;
    c.rope_scaling.original_max_position_embeddings = 16;
  }
  return c;
}

}  // namespace sinkq::train
