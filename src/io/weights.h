// sinkq/io/weights.h — HF tensor names mapped to roles, once; validated shapes.
//
// Matrices are row-major [out, in] (HF nn.Linear layout). Small vectors (norm weights, biases)
// are widened to fp32 and owned. Large matrices stay in their on-disk dtype inside the mmap.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "io/config.h"
#include "io/safetensors.h"

namespace sinkq {

// Type-erased 2-D matrix view (gemma.cpp's MatPtr idea): row-major, `rows` x `cols`.
struct Mat {
  DType dtype = DType::F32;
  int64_t rows = 0, cols = 0;
  const void* data = nullptr;
  std::string name;  // HF tensor name, for messages
  bool empty() const { return data == nullptr; }
};

// A linear layer's computation when it is not the fp32 matmul of its Mat: the packed low-bit
// kernels (src/runtime/packed_linear.h) plug in here without the model depending on them.
// apply() has exactly matmul's contract (kernels/ops.h): y[T, out] = x[T, in] · Wᵀ (+ bias[out]
// when bias is non-null), x and y row-major, y not aliasing x. The caller passes the layer's own
// bias (LayerWeights::bq/bk/bv, or nullptr), so the bias is never stored twice and the
// implementation applies it (the lowbit GEMM fuses it into its dequantization). apply() is const
// and must be safe to call from several threads at once (one Model, many Forwards).
struct LinearImpl {
  virtual ~LinearImpl() = default;
  virtual void apply(const float* x, int64_t T, const float* bias, float* y) const = 0;
  virtual std::string describe() const = 0;  // one line, e.g. "w4_g128 x a8_per_token"
  virtual size_t bytes() const = 0;           // weight bytes it reads per call (codes, scales, zeros)
};

struct LayerWeights {
  const float* attn_norm = nullptr;  // [hidden]
  Mat wq, wk, wv, wo;                // [q_dim, hidden], [kv_dim, hidden] x2, [hidden, q_dim]
  const float* bq = nullptr;         // [q_dim] or nullptr (Qwen2)
  const float* bk = nullptr;         // [kv_dim]
  const float* bv = nullptr;         // [kv_dim]
  const float* mlp_norm = nullptr;   // [hidden]
  Mat w_gate, w_up, w_down;          // [inter, hidden] x2, [hidden, inter]
  // Optional replacements of the seven linears above (null = the fp32 matmul of the Mat, the
  // default). When set, Forward runs impl->apply(x, T, bias, y) for that layer; the Mat then
  // still describes the source matrix (shape, name) but its data is not read by the forward pass.
  struct Impls {
    std::shared_ptr<const LinearImpl> q, k, v, o, gate, up, down;
  } impl;
};

struct ModelWeights {
  TensorStore store;                 // keeps the mappings alive
  Mat embed;                         // [vocab, hidden]
  std::vector<LayerWeights> layers;
  const float* final_norm = nullptr; // [hidden]
  Mat lm_head;                       // [vocab, hidden]; == embed when tied
  // Owned fp32 buffers (norms, biases, and any transformed weights later passes create).
  // A Mat whose bytes in the file are not aligned to its element size (possible in valid but
  // unusual files) is also copied here, bytes unchanged; Mat::data is always aligned.
  std::deque<std::vector<float>> owned;

  ModelWeights() = default;
  ModelWeights(ModelWeights&&) = default;  // deque/vector moves keep every buffer in place
  ModelWeights& operator=(ModelWeights&&) = default;
  ModelWeights(const ModelWeights&) = delete;  // pointers would still point into the original
  ModelWeights& operator=(const ModelWeights&) = delete;

  // Every tensor the config requires must be present with the exact shape; error names the
  // tensor, its shape and the expected one. Unknown extra tensors are an error too (a model of
  // another architecture would otherwise load silently), except rotary_emb.inv_freq buffers.
  // o_proj / MLP biases: "not supported" errors. Tied: lm_head = embed; an lm_head.weight present
  // in the files anyway is ignored (as HF does). Untied without lm_head.weight: error.
  static ModelWeights load(const std::string& dir, const ModelConfig& cfg);
  const float* own(std::vector<float> v);  // move into `owned`, return stable pointer
  int64_t parameter_count() const;         // counts lm_head once when tied
};

// A model directory or a GGUF file: config + weights (tokenizer is separate: tokenizer/tokenizer.h).
struct ModelFiles {
  std::string dir;  // the directory, or the GGUF file's path
  ModelConfig config;
  ModelWeights weights;
  // dir/config.json + safetensors; a path to a GGUF file (magic "GGUF") goes to load_gguf.
  static ModelFiles load(const std::string& dir);
  // A GGUF file (io/gguf_model.cc): config from its metadata, every tensor dequantized to fp32,
  // q/k rows un-permuted to the HF layout.
  static ModelFiles load_gguf(const std::string& path);
};

class GgufFile;
// The HF-equivalent config of a GGUF file's `{arch}.*` metadata, validated by ModelConfig::from_json.
ModelConfig model_config_from_gguf(const GgufFile& g);

}  // namespace sinkq
