// sinkq/io/weights.h — HF tensor names mapped to roles, once; validated shapes.
//
// Matrices are row-major [out, in] (HF nn.Linear layout). Small vectors (norm weights, biases)
// are widened to fp32 and owned. Large matrices stay in their on-disk dtype inside the mmap.
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/mat.h"
#include "io/config.h"
#include "io/safetensors.h"

namespace sinkq {


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
  // Rows `ids` of the weight matrix, dequantized, into out[ids.size(), in] (an embedding table
  // held by its implementation). Throws sinkq::Error for an id outside [0, out).
  virtual void gather_rows(std::span<const int32_t> ids, float* out) const = 0;
  // Several linears over the same input x (q/k/v; gate/up): y[m] = others[m]'s apply(x, T,
  // bias[m]), where others[0] is this. The default calls apply for each; an implementation shares
  // the work it can (packed: one activation quantization and one GEMM dispatch for the whole site)
  // with results equal bit for bit to the separate calls.
  virtual void apply_shared(const float* x, int64_t T, std::span<const LinearImpl* const> others,
                            std::span<const float* const> bias, std::span<float* const> y) const {
    for (size_t m = 0; m < others.size(); ++m) others[m]->apply(x, T, bias[m], y[m]);
  }
};

// The seven linear roles of a decoder layer, in forward order: one table for every loop over
// them (loaders, simulator, calibration, packing, artifact, bench). `input` is the activation that
// feeds the role, an index into the four linear inputs attn_in, o_in, mlp_in, down_in
// (model/sites.h kLinearInputSites). Shapes are [out, in] in units of the config's dimensions.
enum class LinearRole : uint8_t { Q, K, V, O, Gate, Up, Down };
inline constexpr int kNumLinearRoles = 7;
struct LinearRoleInfo {
  enum class Dim : uint8_t { Hidden, Q, Kv, Inter };
  LinearRole role;
  const char* name;  // "q_proj": the reports' and the simulator's name
  const char* hf;    // "self_attn.q_proj": model.layers.N.<hf>.weight in HF checkpoints and artifacts
  const char* gguf;  // "attn_q": blk.N.<gguf>.weight in GGUF files
  int input;         // 0 attn_in, 1 o_in, 2 mlp_in, 3 down_in
  Dim out, in;
};
inline constexpr LinearRoleInfo kLinearRoles[kNumLinearRoles] = {
    {LinearRole::Q, "q_proj", "self_attn.q_proj", "attn_q", 0, LinearRoleInfo::Dim::Q, LinearRoleInfo::Dim::Hidden},
    {LinearRole::K, "k_proj", "self_attn.k_proj", "attn_k", 0, LinearRoleInfo::Dim::Kv, LinearRoleInfo::Dim::Hidden},
    {LinearRole::V, "v_proj", "self_attn.v_proj", "attn_v", 0, LinearRoleInfo::Dim::Kv, LinearRoleInfo::Dim::Hidden},
    {LinearRole::O, "o_proj", "self_attn.o_proj", "attn_output", 1, LinearRoleInfo::Dim::Hidden, LinearRoleInfo::Dim::Q},
    {LinearRole::Gate, "gate_proj", "mlp.gate_proj", "ffn_gate", 2, LinearRoleInfo::Dim::Inter, LinearRoleInfo::Dim::Hidden},
    {LinearRole::Up, "up_proj", "mlp.up_proj", "ffn_up", 2, LinearRoleInfo::Dim::Inter, LinearRoleInfo::Dim::Hidden},
    {LinearRole::Down, "down_proj", "mlp.down_proj", "ffn_down", 3, LinearRoleInfo::Dim::Hidden, LinearRoleInfo::Dim::Inter},
};
static_assert(int(LinearRole::Down) == kNumLinearRoles - 1);
inline const LinearRoleInfo& role_info(int i) { return kLinearRoles[i]; }
// The size of a table dimension in a model of config `c`.
int64_t role_dim(LinearRoleInfo::Dim d, const ModelConfig& c);
// Where role r's rows sit in a fused tensor (LayerSpec::fused_linears, Phi-3): q, k, v in
// [q; k; v] (HF self_attn.qkv_proj, GGUF attn_qkv), gate and up in [gate; up] (HF
// mlp.gate_up_proj, GGUF ffn_up); nullopt for a role stored on its own (o, down; every role
// without fused_linears).
struct FusedPart {
  const char* hf;     // "self_attn.qkv_proj"
  const char* gguf;   // "attn_qkv"
  int64_t rows;       // the fused tensor's rows
  int64_t row0;       // role r's first row in it
};
std::optional<FusedPart> fused_part(const LinearRoleInfo& r, const ModelConfig& c);

// The decoder layers one process holds (MPI pipeline parallelism, dist/pipeline.h: a contiguous
// stage of the layers): [begin, end) of the config's num_layers, the embedding table when begin
// == 0, the final norm and the LM head when end == num_layers (tied: the table on both ends). The
// default holds the whole model. Loaders check every tensor's name and shape but do not read the
// data of what the range does not hold: those Mats keep their shape and name with data == nullptr.
struct LayerRange {
  int begin = 0, end = -1;  // end < 0: to the last layer
  static LayerRange all() { return {}; }
  int end_of(int layers) const { return end < 0 ? layers : end; }
  bool whole(int layers) const { return begin == 0 && end_of(layers) == layers; }
  bool holds(int l, int layers) const { return l >= begin && l < end_of(layers); }
  bool first() const { return begin == 0; }
  bool last(int layers) const { return end_of(layers) == layers; }
  // The embedding table: the first stage embeds, the last one's LM head is the table when tied.
  bool holds_embed(int layers, bool tied) const { return first() || (tied && last(layers)); }
  // Error naming the range unless 0 <= begin < end <= layers.
  void check(int layers) const;
};

// The vectors of a decoder layer (norm weights and biases), by role: the second half of the layer's
// tensor schema (kLinearRoles is the first). Each row names the tensor in every format and the
// feature of the architecture (io/config.h LayerSpec) that makes it present. Loaders, the artifact
// writer and reader, the training copy and rotation loop over this table; LayerWeights holds one
// pointer per role (nullptr when the architecture has no such tensor).
enum class VecRole : uint8_t { AttnNorm, QBias, KBias, VBias, QNorm, KNorm, PostAttnNorm, MlpNorm, PostMlpNorm };
inline constexpr int kNumVecRoles = 9;
struct VecRoleInfo {
  enum class Kind : uint8_t { Norm, HeadNorm, Bias };
  enum class When : uint8_t { Always, QkvBias, QkNorm, PostNorms };
  enum class Dim : uint8_t { Hidden, Q, Kv, Head };
  VecRole role;
  const char* name;      // "attn_norm": reports, the training copy
  const char* hf;        // model.layers.N.<hf>.weight / .bias (Llama layout)
  const char* hf_post;   // the name in a family with post-norms (Gemma 2/3 call the MLP's input norm
                         // pre_feedforward_layernorm and its post_attention_layernorm is a post-norm)
  const char* gguf;      // blk.N.<gguf>.weight / .bias
  Kind kind;
  When when;
  Dim dim;
  int linear;            // Bias: the linear role it belongs to (LinearRole); else -1
};
inline constexpr VecRoleInfo kVecRoles[kNumVecRoles] = {
    {VecRole::AttnNorm, "attn_norm", "input_layernorm", "input_layernorm", "attn_norm", VecRoleInfo::Kind::Norm, VecRoleInfo::When::Always, VecRoleInfo::Dim::Hidden, -1},
    {VecRole::QBias, "q_bias", "self_attn.q_proj", "self_attn.q_proj", "attn_q", VecRoleInfo::Kind::Bias, VecRoleInfo::When::QkvBias, VecRoleInfo::Dim::Q, 0},
    {VecRole::KBias, "k_bias", "self_attn.k_proj", "self_attn.k_proj", "attn_k", VecRoleInfo::Kind::Bias, VecRoleInfo::When::QkvBias, VecRoleInfo::Dim::Kv, 1},
    {VecRole::VBias, "v_bias", "self_attn.v_proj", "self_attn.v_proj", "attn_v", VecRoleInfo::Kind::Bias, VecRoleInfo::When::QkvBias, VecRoleInfo::Dim::Kv, 2},
    {VecRole::QNorm, "q_norm", "self_attn.q_norm", "self_attn.q_norm", "attn_q_norm", VecRoleInfo::Kind::HeadNorm, VecRoleInfo::When::QkNorm, VecRoleInfo::Dim::Head, -1},
    {VecRole::KNorm, "k_norm", "self_attn.k_norm", "self_attn.k_norm", "attn_k_norm", VecRoleInfo::Kind::HeadNorm, VecRoleInfo::When::QkNorm, VecRoleInfo::Dim::Head, -1},
    {VecRole::PostAttnNorm, "post_attn_norm", "post_attention_layernorm", "post_attention_layernorm", "post_attention_norm", VecRoleInfo::Kind::Norm, VecRoleInfo::When::PostNorms, VecRoleInfo::Dim::Hidden, -1},
    {VecRole::MlpNorm, "mlp_norm", "post_attention_layernorm", "pre_feedforward_layernorm", "ffn_norm", VecRoleInfo::Kind::Norm, VecRoleInfo::When::Always, VecRoleInfo::Dim::Hidden, -1},
    {VecRole::PostMlpNorm, "post_mlp_norm", "post_feedforward_layernorm", "post_feedforward_layernorm", "post_ffw_norm", VecRoleInfo::Kind::Norm, VecRoleInfo::When::PostNorms, VecRoleInfo::Dim::Hidden, -1},
};
static_assert(int(VecRole::PostMlpNorm) == kNumVecRoles - 1);
inline const VecRoleInfo& vec_info(VecRole r) { return kVecRoles[int(r)]; }
// Whether a model of config `c` has role r's tensor; its length; its full names in layer `l`.
bool has_vec(const VecRoleInfo& r, const ModelConfig& c);
int64_t vec_dim(const VecRoleInfo& r, const ModelConfig& c);
std::string hf_vec_name(const VecRoleInfo& r, const ModelConfig& c, int l);    // model.layers.l.….weight|bias
std::string gguf_vec_name(const VecRoleInfo& r, int l);                        // blk.l.….weight|bias

struct LayerWeights {
  // The seven linears (kLinearRoles order). impls: optional replacements (null = the fp32 matmul
  // of the Mat, the default). When set, Forward runs impl->apply(x, T, bias, y) for that role; the
  // Mat then still describes the source matrix (shape, name) but its data is not read.
  std::array<Mat, kNumLinearRoles> mats;
  std::array<std::shared_ptr<const LinearImpl>, kNumLinearRoles> impls;
  // Norm weights [hidden] / [head_dim] and biases [out] (kVecRoles order), fp32; nullptr = absent.
  std::array<const float*, kNumVecRoles> vecs{};

  Mat& mat(LinearRole r) { return mats[size_t(r)]; }
  const Mat& mat(LinearRole r) const { return mats[size_t(r)]; }
  Mat& mat(int i) { return mats[size_t(i)]; }
  const Mat& mat(int i) const { return mats[size_t(i)]; }
  std::shared_ptr<const LinearImpl>& impl_of(LinearRole r) { return impls[size_t(r)]; }
  const std::shared_ptr<const LinearImpl>& impl_of(LinearRole r) const { return impls[size_t(r)]; }
  std::shared_ptr<const LinearImpl>& impl_of(int i) { return impls[size_t(i)]; }
  const std::shared_ptr<const LinearImpl>& impl_of(int i) const { return impls[size_t(i)]; }
  const float*& vec(VecRole r) { return vecs[size_t(r)]; }
  const float* vec(VecRole r) const { return vecs[size_t(r)]; }
  // The bias of linear role i (q/k/v), or nullptr.
  const float* bias(int i) const {
    return i == 0 ? vec(VecRole::QBias) : i == 1 ? vec(VecRole::KBias) : i == 2 ? vec(VecRole::VBias) : nullptr;
  }
};

// The decoder layer a tensor belongs to by its name: model.layers.N.* (HF checkpoints, artifacts)
// or blk.N.* (GGUF); -1 for every other tensor (embeddings, final norm, head, prefix).
int tensor_layer(const std::string& name);

struct ModelWeights {
  TensorStore store;                 // keeps the mappings alive
  Mat embed;                         // [vocab, hidden]
  std::vector<LayerWeights> layers;
  const float* final_norm = nullptr; // [hidden]
  Mat lm_head;                       // [vocab, hidden]; == embed when tied
  // The packed (int8 / int4) head (quant/recipe.h HeadSim; runtime/packed_linear.h): when set, the LM head runs
  // lm_head_impl and embedding rows come from embed_impl (the same object when tied); the Mats
  // above then keep their shapes and names, and their data only where the source's tensors are
  // still held (an artifact stores the packed table alone: data == nullptr).
  std::shared_ptr<const LinearImpl> lm_head_impl, embed_impl;
  // Owned fp32 buffers (norms, biases, and any transformed weights later passes create).
  // A Mat whose bytes in the file are not aligned to its element size (possible in valid but
  // unusual files) is also copied here, bytes unchanged; Mat::data is always aligned.
  std::deque<std::vector<float>> owned;
  // Owned bytes of other types: a GGUF model held as stored whose q/k rows had to be reordered
  // (llama.cpp's per-head permutation) keeps those rows' blocks here.
  std::deque<std::vector<std::byte>> owned_bytes;
  // What else Mats may point into (a GGUF file's mapping when its weights are held as stored).
  std::shared_ptr<const void> keep_alive;

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
  static ModelWeights load(const std::string& dir, const ModelConfig& cfg, LayerRange range = {});
  const float* own(std::vector<float> v);  // move into `owned`, return stable pointer
  bool owns(const void* p) const;           // whether p is the start of one of `owned`'s buffers
  int64_t parameter_count(const ModelConfig& c) const;  // counts lm_head once when tied
  // One table for the embeddings and the LM head (the int8 head's: one impl; else one Mat).
  bool tied() const { return lm_head_impl ? lm_head_impl == embed_impl : lm_head.data == embed.data; }
};

// A model directory or a GGUF file: config + weights (tokenizer is separate: tokenizer/tokenizer.h).
struct ModelFiles {
  std::string dir;  // the directory, or the GGUF file's path
  ModelConfig config;
  ModelWeights weights;
  // dir/config.json + safetensors; a path to a GGUF file (magic "GGUF") goes to load_gguf.
  // `range`: only those layers' tensors are read (LayerRange).
  static ModelFiles load(const std::string& dir, LayerRange range = {});
  // A GGUF file (io/gguf_model.cc): config from its metadata, every tensor (of `range`) held as
  // gguf_weights() says, q/k rows un-permuted to the HF layout.
  static ModelFiles load_gguf(const std::string& path, LayerRange range = {});
};

// How a GGUF model's matrices are held: F32 = dequantized to owned fp32 at load; Stored = the
// file's own ggml blocks (Q4_K, …), mmap'd, dequantized by the kernels where used (DType's block
// types; row blocks as F32's) — the same fp32 values either way, so the same results bit for bit,
// at a seventh of the memory for a 4-bit file. F32 / F16 / BF16 tensors and the norm weights and
// biases are fp32 in both (an F16 matrix held as F16 would run sgemm on other row blocks).
enum class GgufWeights : uint8_t { F32, Stored };
// SINKQ_GGUF_WEIGHTS = f32 | stored | auto (the default, and an empty value) | fit: auto is stored —
// with the SIMD block kernels (kernels/dequant_simd.inc) a stored model decodes faster than its
// fp32 copy (it reads a seventh of the bytes: Zen 3, 2 threads, 8.5 vs 4.4 tokens/s on
// Qwen2.5-1.5B Q4_K_M, 102 vs 47 on SmolLM2 Q4_1) and prefills at the same speed (the sgemm
// dominates the dequantization), at a seventh of the memory. fit dequantizes at load while that
// takes at most max(kGgufF32FitBytes, a third of the available memory); f32 always (what a CPU
// without AVX2, on the scalar reference, decodes faster). Another value is an error naming the
// variable.
inline constexpr uint64_t kGgufF32FitBytes = uint64_t(2) << 30;
GgufWeights gguf_weights(uint64_t f32_bytes);

class GgufFile;
// The HF-equivalent config of a GGUF file's `{arch}.*` metadata, validated by ModelConfig::from_json.
ModelConfig model_config_from_gguf(const GgufFile& g);
// The config of a model path as ModelFiles::load reads it: a GGUF file's metadata, else the
// directory's config.json (errors name the path).
ModelConfig model_config_of(const std::string& path);

}  // namespace sinkq
