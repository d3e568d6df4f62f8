// sinkq/runtime/packed_linear.h — the real quantized linear layers of the forward pass: weights
// packed once into the lowbit formats, activations quantized to int8 / int4 on every call, the
// integer GEMM with fused dequantization and bias (lowbit/kernels.h).
//
// A packed model is the base model whose q/k/v/o/gate/up/down linears carry a PackedLinear in
// LayerWeights::impl (io/weights.h); Forward then runs impl->apply instead of the fp32 matmul.
// Norms and attention stay fp32; embeddings and lm_head too unless the packed head is on (pack_head). Site hooks still see the fp32 linear inputs.
//
// What a packed linear computes is exactly what the simulator computes (quant/sim.h: weights
// fake-quantized by fake_quant_weight, activations fake-quantized at attn_in / o_in / mlp_in /
// down_in) with the same quantizer (formats/quantizer.h): the same integer codes and scales; only
// the fp32 summation order differs (the GEMM sums integer products exactly, the simulated matmul
// sums fp32 products), see lowbit/kernels.h for the per-output bound.
//
// Weights follow the simulator's block rule (sim.h fake_quant_weight) for a matrix of `in` cols:
//   group 0          one scale per output channel: w8_per_row / w4_per_row
//   group G >= in    one group per row, i.e. per channel (as the simulator does)
//   G divides in     w4_g{G}[_asym]
//   otherwise        columns [0, G·⌊in/G⌋) as w4_g{G}[_asym], the ragged rest (in mod G columns)
//                    as one more per-row block; y = y_main (+ bias) + y_tail, both from one
//                    quantization of the activation row (per-token scales span all columns)
// A per-row block of asymmetric int4 is stored as w4_g{width}_asym (the same params: one group
// per row), so it can run only when its width is 32, 64 or 128.
//
// Anything the kernels cannot run is a sinkq::Error at pack time that says what and why: there is
// never a fallback to fp32 or to simulation.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "formats/quantizer.h"
#include "io/weights.h"
#include "lowbit/formats.h"
#include "lowbit/kernels.h"
#include "model/model.h"
#include "model/sites.h"
#include "quant/crossquant.h"
#include "quant/recipe.h"

namespace sinkq::runtime {

// Weight quantization: the recipe's own WeightSim (bits, group, symmetric, clip; clip_grid has no
// meaning here: what is packed carries its clip already). The runtime defaults to 8 bits.
using WeightScheme = quant::WeightSim;
// Dynamic per token (a*_per_token), static per tensor (a*_per_tensor, calibrated), or Cross:
// CrossQuant with static column maxima folded into the weights (quant/crossquant.h CrossFold),
// a*_per_token codes at the token factor's scale. CrossQuant with per-call or running column
// maxima has an element-wise scale and no packed form.
using ActMode = quant::ActMode;

// Calibrated per-tensor params of one activation site (attn_in, o_in, mlp_in or down_in) of one
// layer: quant::Params of Granularity::PerTensor, symmetric, bits = ActScheme::bits, over the
// site's feature count (e.g. from quant::Calibrator or build_sim's StaticQuant::params).
struct StaticActScale {
  int layer = 0;
  Site site = Site::AttnIn;
  quant::Params params;
};

struct ActScheme {
  int bits = 8;            // 8 or 4 (16 = fp32 activations, weight-only: cannot run)
  bool symmetric = true;   // must be true: the integer GEMM has no activation zero points
  ActMode mode = ActMode::Dynamic;
  std::vector<StaticActScale> scales;  // Static: one per (layer, site) of every layer
  // Cross: one fold per (layer, linear input site), [layer * 4 + linear_input_index(site)] (bits
  // and alpha of each equal to this scheme's bits and the recipe's alpha).
  std::vector<quant::CrossFold> cross;
};

struct RuntimeConfig {
  WeightScheme w{.bits = 8};                   // every (layer, role) without a matching rule
  std::vector<quant::WeightRule> weight_rules;  // the recipe's per-(layer, role) overrides
  ActScheme a;
  quant::HeadSim head;  // embeddings and LM head in int8 / int4 when on (quant/recipe.h): pack_model packs them
  // The weights of one matrix (quant::resolve_weights: the recipe's one resolution).
  WeightScheme weights(int layer, int role, int num_layers) const {
    return quant::resolve_weights(w, weight_rules, layer, role, num_layers);
  }
  // Throws sinkq::Error saying exactly what the lowbit kernels cannot run (per-model checks, such
  // as the static scale table or ragged asymmetric groups, are made by pack_model). The default
  // weights and each rule applied to them are checked; a combination of rules that cannot run is
  // an error naming the matrix when it is packed.
  void validate() const;
  // e.g. "W4 g128 asym | A8 dynamic per-token"
  std::string describe() const;
};

// Throws sinkq::Error saying why the lowbit kernels cannot run weights `ws` (`what` prefixes the
// message, e.g. the matrix or the rule).
void check_weights(const WeightScheme& ws, const std::string& what = "");

// The activation format of a scheme (a8/a4 per token or per tensor); validates it.
lowbit::PackedFormat activation_format(const ActScheme& a);

// The column blocks of a weight matrix with `cols` input columns under `ws` (the simulator's
// block rule above): (col0, width, format) of each, 1 or 2 blocks. Throws sinkq::Error (naming
// `name`) when a block has no format.
struct WeightBlock {
  int64_t col0 = 0, cols = 0;
  lowbit::PackedFormat format = lowbit::PackedFormat::W8_PerRow;
};
std::vector<WeightBlock> weight_blocks(const WeightScheme& ws, int64_t cols, const std::string& name);

// One packed linear layer y = x̂ · ŵᵀ (+ bias). Immutable after construction; apply() is
// thread-safe (per-thread scratch) and its result does not depend on the thread count or ISA.
class PackedLinear final : public LinearImpl {
 public:
  struct Block {
    int64_t col0 = 0, cols = 0;      // the input columns this block covers
    lowbit::KernelWeights w;         // repacked for lowbit::gemm
  };

  // Packs w[rows, cols] (fp32, row-major [out, in]) under `ws`. act: an activation format;
  // static_params: its calibrated per-tensor params for per-tensor formats (ignored otherwise).
  // cross: CrossQuant's fold of this input (per-token formats only): apply() quantizes
  // x / b at the token factor's scale (crossquant.h), and `w` must already be folded (W·diag(b)).
  // name: for messages (the HF tensor name).
  PackedLinear(std::string name, const float* w, int64_t rows, int64_t cols, const WeightScheme& ws,
               lowbit::PackedFormat act, quant::Params static_params = {},
               std::shared_ptr<const quant::CrossFold> cross = nullptr);
  // From already packed weights (an artifact's stored codes, or runtime/quantized_model.h's exact
  // packing): one PackedTensor per column block, in column order, covering [0, cols) without gaps,
  // each a weight format with `rows` rows. Throws sinkq::Error naming `name` otherwise.
  struct PlanarBlock {
    int64_t col0 = 0;
    lowbit::PackedTensor w;
  };
  PackedLinear(std::string name, int64_t rows, int64_t cols, std::vector<PlanarBlock> blocks,
               lowbit::PackedFormat act, quant::Params static_params = {},
               std::shared_ptr<const quant::CrossFold> cross = nullptr);

  void apply(const float* x, int64_t T, const float* bias, float* y) const override;
  // q/k/v, gate/up: the input quantized once when every member is a PackedLinear with this one's
  // input quantization (same_input_quantization), and one lowbit::gemm_multi dispatch when they
  // are also one block of one format; else one apply each. Bit for bit the separate applies.
  void apply_shared(const float* x, int64_t T, std::span<const LinearImpl* const> others,
                    std::span<const float* const> bias, std::span<float* const> y) const override;
  // Whether o quantizes its input exactly as this one does (format, static scale, CrossQuant fold).
  bool same_input_quantization(const PackedLinear& o) const;
  std::string describe() const override;
  // Rows of ŵ (symmetric formats: s·c, exactly the simulator's fake-quantized values), e.g. the
  // int8 embedding table; an asymmetric format is a sinkq::Error.
  void gather_rows(std::span<const int32_t> ids, float* out) const override;

  int64_t rows() const { return rows_; }
  int64_t cols() const { return cols_; }
  lowbit::PackedFormat activation() const { return act_; }
  const std::vector<Block>& blocks() const { return blocks_; }
  // Block b back in the planar file layout (formats/packed_format.h), recovered from the kernel layout
  // (exact inverse of lowbit::repack): what an artifact stores.
  lowbit::PackedTensor planar(size_t b) const;
  const quant::Params& static_params() const { return static_; }  // per-tensor formats only
  const quant::CrossFold* cross() const { return cross_.get(); }   // null unless CrossQuant
  const std::string& name() const { return name_; }
  size_t bytes() const override;  // packed weight bytes (codes, scales, zeros)

 private:
  std::string name_;
  int64_t rows_ = 0, cols_ = 0;
  void init_activation(lowbit::PackedFormat act, quant::Params static_params,
                       std::shared_ptr<const quant::CrossFold> cross);
  void quantize_input(const float* x, int64_t T, lowbit::PackedTensor& xq) const;  // names this linear on error
  void run(const lowbit::PackedTensor& xq, const float* bias, float* y) const;       // the blocks' GEMMs

  lowbit::PackedFormat act_;
  quant::Params static_;      // per-tensor formats only
  std::shared_ptr<const quant::CrossFold> cross_;  // CrossQuant's fold (per-token formats), or null
  std::vector<Block> blocks_;  // 1, or 2 with a ragged last group
};

// The packed model: `base` with a PackedLinear on each of the seven linears of every layer
// (LayerWeights::impl); everything else is shared with `base`, which the result keeps alive.
// Static activations: cfg.a.scales must hold exactly one entry per (layer, site) for the sites
// attn_in, o_in, mlp_in, down_in of every layer. Cross: cfg.a.cross one fold per (layer, site), and
// `base`'s weights are unfolded (fp): each is multiplied by its input's b before it is quantized. Throws sinkq::Error (naming the matrix, layer or
// site) for anything the kernels cannot run, or when `base` is already packed.
std::shared_ptr<const Model> pack_model(std::shared_ptr<const Model> base, const RuntimeConfig& cfg);

// The activation format of the packed LM head's input (quant::HeadSim::activations: a8 per token).
lowbit::PackedFormat head_act_format();

// The packed head of w (quant/recipe.h HeadSim): lm_head_impl = make(lm_head), embed_impl = the same
// object when tied, else make(embed); the two Mats then keep shape and name only (data nullptr).
// make packs a [vocab, hidden] table as HeadSim::weights() with head_act_format() activations.
// A pipeline stage (dist/pipeline.h) packs the tables it holds: first, the embeddings (and the
// tied table); last, the LM head.
void pack_head(ModelWeights& w, const std::function<std::shared_ptr<const LinearImpl>(const Mat& m)>& make,
               bool first = true, bool last = true);

// The one pack loop: make(l, i, m) for every layer l and linear role i (io/weights.h kLinearRoles)
// of `w`, in parallel over the matrices (make runs single-threaded inside; it must be safe to call
// concurrently), each result put into layer l's implementation slot of role i. The first error
// (in layer, role order) is rethrown after every job has ended; w is then partly packed. Layers
// outside `held` (another pipeline stage's) are left as they are.
void pack_linears(ModelWeights& w,
                  const std::function<std::shared_ptr<const LinearImpl>(int l, int i, const Mat& m)>& make,
                  LayerRange held = {});

}  // namespace sinkq::runtime
