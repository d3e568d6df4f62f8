// sinkq/io/config.h — HF config.json -> ModelConfig, validated.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <string>
#include <vector>

#include "core/rope.h"

namespace sinkq {

enum class Arch { Llama, Mistral, Qwen2 };

struct ModelConfig {
  std::string architecture;  // as in config.json: LlamaForCausalLM | MistralForCausalLM | Qwen2ForCausalLM
  Arch arch = Arch::Llama;
  int hidden_size = 0;
  int intermediate_size = 0;
  int num_layers = 0;
  int num_heads = 0;
  int num_kv_heads = 0;      // defaults to num_heads
  int head_dim = 0;          // defaults to hidden_size / num_heads
  int vocab_size = 0;
  int max_position_embeddings = 0;
  float rms_norm_eps = 1e-6f;
  float rope_theta = 10000.0f;
  RopeScaling rope_scaling;
  bool tie_word_embeddings = false;
  bool qkv_bias = false;     // Qwen2: always; Llama: attention_bias (o_proj bias then rejected)
  // 0 = full attention. Else query i sees keys j with i - window < j <= i (HF's rule: the window
  // counts the query itself). Mistral: key absent -> 4096 (HF default), null -> 0. Qwen2: only with
  // use_sliding_window and max_window_layers 0 (all layers); a per-layer mix is rejected.
  int sliding_window = 0;
  int bos_token_id = -1;     // -1 = none
  std::vector<int> eos_token_ids;
  std::string torch_dtype;   // informational

  RopeParams rope() const;  // head_dim (or hidden_size / num_heads), rope_theta, rope_scaling
  int q_dim() const { return num_heads * head_dim; }
  int kv_dim() const { return num_kv_heads * head_dim; }

  // Throws sinkq::Error naming `source` and the field for missing/invalid fields or an
  // unsupported architecture / hidden_act / rope_scaling type.
  static ModelConfig from_json(const nlohmann::json& j, const std::string& source);
  static ModelConfig load(const std::string& config_json_path);
  // HF-compatible config.json; from_json(to_json()) == *this. Floats are written as their
  // shortest decimal (1e-05). head_dim and num_key_value_heads are always written explicitly.
  nlohmann::json to_json() const;
  bool operator==(const ModelConfig&) const = default;
};

}  // namespace sinkq
