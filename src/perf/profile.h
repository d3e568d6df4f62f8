// sinkq/perf/profile.h — the per-op profile of `sinkq bench`.
//
// Per-op profile: a timestamp at every activation site (model/sites.h). The sites fire between
// the ops of Forward::layer, so consecutive stamps bracket them:
//   norms          Out(l-1) -> AttnIn(l) (layer 0: from the start of the step: + the embedding
//                  gather), plus the MLP norm, which has no site of its own before it: it is the
//                  same op on the same shape, so it is charged the attention norm's time and that
//                  is taken off the o_proj interval
//   attn_in quant + q/k/v   AttnIn -> KPreRope (per linear: activation quantization + GEMM)
//   rope           KPreRope -> V (RoPE of q and k; the Q and K sites sit in between)
//   attention      V -> OIn
//   o_proj         OIn -> MlpIn, minus the MLP norm (above); includes the residual add
//   gate/up        MlpIn -> DownIn minus silu
//   silu*mul       not bracketed by sites: the median of silu_mul() timed alone on the same
//                  [T, intermediate] shape and threads, taken off the gate/up interval
//   down           DownIn -> Out (includes the residual add)
//   lm_head        Out(last layer) -> end of the step: final norm + lm_head (+ logits)
// The profile runs as its own pass (hooks registered), after the timed passes (none registered).
// "of which activation quantization" is an estimate: quantize_dynamic / quantize_static timed
// alone on the shapes and call counts of one step (PackedLinear quantizes its input once per
// linear, so attn_in 3x and mlp_in 2x).
#pragma once

#include <nlohmann/json.hpp>

#include <array>

#include "perf/bench.h"
#include "runtime/packed_linear.h"

namespace sinkq::perf {

// The ops a step is split into (the comment above), in forward order.
enum Op { kNorms, kQkv, kRope, kAttention, kOProj, kGateUp, kSilu, kDown, kLmHead, kNumOps };
inline constexpr const char* kOpNames[kNumOps] = {"norms", "attn_in quant + q/k/v", "rope", "attention", "o_proj",
                                          "gate/up", "silu*mul", "down", "lm_head"};
inline constexpr const char* kOpKeys[kNumOps] = {"norms", "qkv", "rope", "attention", "o_proj",
                                         "gate_up", "silu", "down", "lm_head"};

using OpTimes = std::array<double, kNumOps>;  // seconds

struct Profile {
  OpTimes prefill{}, decode{};   // medians per op: one prefill, one decode step
  double prefill_step = 0, decode_step = 0;  // median wall time of a profiled step
  double silu_prefill = 0, silu_decode = 0;  // the silu_mul estimates used
  double quant_prefill = 0, quant_decode = 0;  // activation quantization estimate per step (0: fp32)
};

// One profiled pass of workload w (hooks registered on fwd for its duration); cfg: the packed
// configuration whose activation quantization is estimated (nullptr: fp32, none).
Profile profile(Forward& fwd, const Workload& w, const runtime::RuntimeConfig* cfg);
nlohmann::json profile_json(const Profile& p, bool decode_on);

}  // namespace sinkq::perf
