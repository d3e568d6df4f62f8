// sinkq/quant/sim.h — simulated (fake) quantization of a whole model: one declarative SimConfig,
// weight fake-quant into owned fp32 matrices, and activation / KV fake-quant as site hooks.
//
// What is quantized (as in PrefixQuant §6.1 / CrossQuant §5, see docs/quant.md "Simulation"):
//   weights      q/k/v/o/gate/up/down_proj of every layer, [out, in]; embeddings and lm_head stay
//                full precision. Per output channel (a row), or groups of `group` input columns.
//   activations  the inputs of those linear layers: sites attn_in [T, hidden] (q/k/v), o_in
//                [T, heads·head_dim], mlp_in [T, hidden] (gate/up), down_in [T, intermediate].
//                Dynamic per-token (one scale per row, from that row) or CrossQuant.
//   KV cache     sites k (after RoPE: what the cache stores) and v, [T, kv_heads·head_dim];
//                dynamic per-token (a row) or per-head (each head_dim slice of a row).
// bits = 16 means "off" for that part (the tensor stays fp32, untouched).
//
// Everything goes through quantizer.h / crossquant.h: this file only decides which tensor gets
// which QuantSpec.
#pragma once

#include <nlohmann/json.hpp>

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "model/model.h"
#include "quant/crossquant.h"
#include "quant/quantizer.h"

namespace sinkq::quant {

inline constexpr int kBitsOff = 16;  // "not quantized"; otherwise bits are 2..8

enum class ActMode : uint8_t {
  Dynamic,  // per-token: scale from each row's abs-max (or min/max), every call
  Static,   // per-tensor, calibrated: needs --calib, not implemented yet (validate() throws)
  Cross,    // CrossQuant: s_ij from the row max^α and a column max^(1-α)
};
std::string_view act_mode_name(ActMode m);
ActMode parse_act_mode(std::string_view s);  // "dynamic" | "static" | "cross"; error names --a-quant

enum class KvGranularity : uint8_t { Token, Head };
std::string_view kv_granularity_name(KvGranularity g);
KvGranularity parse_kv_granularity(std::string_view s);  // "token" | "head"; error names --kv-gran

struct WeightSim {
  int bits = kBitsOff;
  int group = 0;           // 0 = per output channel; G > 0 = groups of G input columns per row
                           // (a last, smaller group when G does not divide `in`: see docs)
  bool symmetric = true;
  float clip = 1.0f;       // clip ratio (0, 1]; the grid search over it is a later step
  bool on() const { return bits != kBitsOff; }
};

struct ActSim {
  int bits = kBitsOff;
  ActMode mode = ActMode::Dynamic;
  bool symmetric = true;   // Dynamic only (CrossQuant is symmetric by definition)
  float alpha = 0.15f;     // Cross only: 0 <= α <= 1 (1 = per-token)
  // Cross only: where column maxima come from. PerCall (default) = over the rows of one forward
  // call, the paper's whole-sequence evaluation (not causal within a window); RunningMax = causal
  // running max, restarted at position 0. Static needs calibration (not implemented yet).
  ColumnMode cross_columns = ColumnMode::PerCall;
  bool on() const { return bits != kBitsOff; }
};

struct KvSim {
  int bits = kBitsOff;
  KvGranularity granularity = KvGranularity::Head;
  bool symmetric = true;   // dynamic only; static KV comes with calibration
  bool on() const { return bits != kBitsOff; }
};

struct SimConfig {
  std::string preset;      // the preset it started from ("" = none); informational only
  WeightSim w;
  ActSim a;
  KvSim kv;

  bool any() const { return w.on() || a.on() || kv.on(); }
  // Throws sinkq::Error naming the CLI flag of the offending field (--w-bits, --a-quant, ...).
  void validate() const;
  // The exact configuration: every field that has an effect, and the sites / matrices it touches.
  nlohmann::json to_json() const;
  // One line, e.g. "W4 per-channel sym | A8 dynamic per-token sym | KV4 dynamic per-head sym".
  std::string describe() const;

  // Named presets (docs/quant.md): fp16 (all off), w8a8kv8, w4a8kv4, w4a4kv4, w8a8, w4a16,
  // w4a16g128. Unknown name: sinkq::Error naming --preset and listing the names.
  static SimConfig from_preset(std::string_view name);
  static std::vector<std::string> preset_names();
};

// Parses a bit width for `flag` ("--w-bits", ...): 2..8 or 16, else sinkq::Error naming the flag.
int parse_bits(std::string_view flag, int bits);

// The QuantSpec a weight matrix [out, in] gets (PerRow, or PerGroup when group divides in);
// exposed for tests. For a group that does not divide `in`, see fake_quant_weight.
QuantSpec weight_spec(const WeightSim& w, int64_t in);
// Fake-quantizes one weight matrix w[rows, cols] (fp32, in place) as the simulator does.
// group > 0 that does not divide cols: columns [0, G·⌊cols/G⌋) are PerGroup, the remaining
// cols mod G columns form one more group per row (the whole row when G > cols).
void fake_quant_weight(const WeightSim& w, float* x, int64_t rows, int64_t cols);

// A model whose q/k/v/o/gate/up/down matrices are widened to fp32 and fake-quantized (owned);
// embeddings, lm_head, norms and biases are shared with `base`, which the result keeps alive.
// With weights off it returns `base` itself (same object: logits bit-identical).
std::shared_ptr<const Model> fake_quantize_weights(std::shared_ptr<const Model> base,
                                                   const SimConfig& cfg);

// Registers the activation and KV hooks of `cfg` on fwd.hooks() (validates cfg first). Returns
// the hook handles (for SiteHooks::remove). Nothing is registered for parts that are off.
// CrossQuant state (RunningMax) lives in the hooks and restarts when a call begins at position 0.
std::vector<int> attach(Forward& fwd, const SimConfig& cfg);

}  // namespace sinkq::quant
