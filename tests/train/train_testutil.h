// tests/train/train_testutil.h — shared by the gradient tests: the tiny model shape they check
// against finite differences (2 layers, GQA 4:2, q/k/v biases, optional llama3 RoPE scaling and
// sliding window), the central difference and its tolerance (derived in grad_model_test.cc).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>

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

inline constexpr double kH = 1e-5;

inline double fd_at(const std::function<double()>& L, double& x) {
  const double x0 = x;
  x = x0 + kH;
  const double up = L();
  x = x0 - kH;
  const double down = L();
  x = x0;
  return (up - down) / (2 * kH);
}

inline void expect_close(double fd, double g, const std::string& what) {
  EXPECT_LE(std::abs(fd - g), 1e-9 + 1e-6 * std::abs(g)) << what << ": fd " << fd << " analytic " << g;
}

}  // namespace sinkq::train
