// sinkq/io/config.h — HF config.json -> ModelConfig, validated.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/rope.h"

namespace sinkq {

// The architectures sinkq runs. Each is one row of the family table (config.cc kFamilies): its HF
// and GGUF names and its LayerSpec. A new family = a row, plus any feature LayerSpec lacks.
enum class Arch { Llama, Mistral, Qwen2, Qwen3, Gemma2, Gemma3, Phi3 };
enum class Activation : uint8_t { Silu, GeluTanh };  // the MLP's gate: silu (SwiGLU) | gelu, tanh form (GeGLU)

// What an architecture's decoder layer (and the model's two ends) computes beyond the Llama layer,
// as flags the forward pass, the loaders, quantization and training read at the same points:
//   x += [post_attn_norm] o_proj(attention(q_norm(q_proj(norm(x))), k_norm(k_proj(norm(x))), v_proj(norm(x))))
//   x += [post_mlp_norm] down_proj(act(gate_proj(norm(x))) * up_proj(norm(x)))
// Values that vary within a family (soft-caps, windows, RoPE bases, the attention scale) are in
// ModelConfig; the flags here are fixed per family.
struct LayerSpec {
  bool qk_norm = false;          // RMSNorm over each head of q and k (weights [head_dim]) before RoPE: Qwen3, Gemma 3
  bool post_norms = false;       // RMSNorm on each block's output before the residual add: Gemma 2 / 3
  bool norm_offset = false;      // every RMSNorm applies (1 + w) (Gemma); HF weights get +1 when loaded (GGUF
                                 // files hold 1 + w already: llama.cpp's converter adds it), so the engine sees w
  Activation act = Activation::Silu;
  bool embed_scale = false;      // embeddings x sqrt(hidden_size), in fp32 (Gemma)
  bool fused_linears = false;    // HF checkpoints hold qkv_proj and gate_up_proj (Phi-3): split when loading
  bool gguf_permuted_qk = false; // llama.cpp permuted q/k rows per head (its "norm" RoPE; llama only)
  bool operator==(const LayerSpec&) const = default;
};

// One row of the family table.
struct Family {
  Arch arch;
  const char* architecture;  // config.json architectures[0]
  const char* model_type;    // config.json model_type
  const char* gguf;          // general.architecture of a GGUF file
  LayerSpec spec;
};
// The family of an HF architecture name / a GGUF general.architecture; nullptr if none.
const Family* family_of_hf(std::string_view architecture);
const Family* family_of_gguf(std::string_view gguf_arch);
const Family& family(Arch a);
std::string supported_architectures();  // "LlamaForCausalLM, …" for error messages

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
  bool qkv_bias = false;     // Qwen2: always; Llama / Qwen3: attention_bias (o_proj bias then rejected)
  // 0 = full attention. Else query i sees keys j with i - window < j <= i (HF's rule: the window
  // counts the query itself). Mistral: key absent -> 4096 (HF default), null -> 0. Qwen2: only with
  // use_sliding_window and max_window_layers 0 (all layers); a per-layer mix is rejected.
  int sliding_window = 0;
  // Which layers use the window (HF layer_types: "sliding_attention" | "full_attention"); empty:
  // every layer when sliding_window > 0. Gemma 2: every other layer from 0; Gemma 3: 5 of 6.
  std::vector<uint8_t> layer_sliding;
  // Gemma 3: the layers with a sliding window use RoPE base rope_local_theta without scaling (the
  // others rope_theta and rope_scaling); 0: one RoPE for all layers.
  float rope_local_theta = 0.0f;
  float query_pre_attn_scalar = 0.0f;  // attention scale = this^-1/2 (Gemma); 0: head_dim^-1/2
  float attn_softcap = 0.0f;           // scores -> cap * tanh(scores / cap) before the softmax (Gemma 2); 0: none
  float final_softcap = 0.0f;          // logits -> cap * tanh(logits / cap) (Gemma 2); 0: none
  int bos_token_id = -1;     // -1 = none
  std::vector<int> eos_token_ids;
  std::string torch_dtype;   // informational

  RopeParams rope() const;  // head_dim (or hidden_size / num_heads), rope_theta, rope_scaling
  RopeParams rope_local() const;  // rope_local_theta, no scaling (Gemma 3's sliding layers)
  const LayerSpec& spec() const { return family(arch).spec; }
  // The sliding window of layer l (0: full attention) and whether it uses rope_local().
  int window(int l) const {
    return sliding_window > 0 && (layer_sliding.empty() || layer_sliding[size_t(l)]) ? sliding_window : 0;
  }
  bool local_rope(int l) const { return rope_local_theta > 0 && window(l) > 0; }
  // The attention score scale: query_pre_attn_scalar^-1/2, else head_dim^-1/2, as HF computes it (fp32).
  float attn_scale() const;
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
