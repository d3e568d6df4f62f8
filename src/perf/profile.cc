// sinkq/perf/profile.cc — see profile.h.
#include "perf/profile.h"

#include <algorithm>

#include "formats/quantizer.h"
#include "kernels/ops.h"
#include "lowbit/kernels.h"

namespace sinkq::perf {

namespace {

// Median time of fn() (after one warm-up call).
template <class F>
double time_median(F fn, int n) {
  fn();
  std::vector<double> t;
  for (int i = 0; i < n; ++i) {
    auto a = Clock::now();
    fn();
    t.push_back(secs(a, Clock::now()));
  }
  return median(t);
}

double silu_seconds(int64_t T, int64_t I) {
  std::vector<float> g(size_t(T * I)), u(size_t(T * I));
  for (size_t i = 0; i < g.size(); ++i) {
    g[i] = float(int(i % 97) - 48) * 0.05f;
    u[i] = float(int(i % 89) - 44) * 0.05f;
  }
  return time_median([&] { silu_mul(g.data(), u.data(), T, I); }, T > 1 ? 5 : 200);
}

// One step's activation quantization as PackedLinear does it: attn_in x3 (q, k, v), o_in, mlp_in
// x2 (gate, up), down_in, every layer.
double act_quant_seconds(const ModelConfig& c, const runtime::RuntimeConfig& cfg, int64_t T) {
  const bool stat = cfg.a.mode == runtime::ActMode::Static;
  using lowbit::PackedFormat;
  const PackedFormat f = cfg.a.bits == 8 ? (stat ? PackedFormat::A8_PerTensor : PackedFormat::A8_PerToken)
                                         : (stat ? PackedFormat::A4_PerTensor : PackedFormat::A4_PerToken);
  const std::pair<int64_t, int> shapes[] = {{c.hidden_size, 3}, {c.q_dim(), 1}, {c.hidden_size, 2},
                                            {c.intermediate_size, 1}};
  double total = 0;
  lowbit::PackedTensor q;
  for (auto [K, calls] : shapes) {
    std::vector<float> x(size_t(T * K));
    for (size_t i = 0; i < x.size(); ++i) x[i] = float(int(i % 211) - 105) * 0.01f;
    const quant::Params p = stat ? quant::compute_params(lowbit::quant_spec(f), x.data(), T, K) : quant::Params{};
    const double s = time_median(
        [&] {
          if (stat) lowbit::quantize_static(f, x.data(), T, K, p, q);
          else lowbit::quantize_dynamic(f, x.data(), T, K, 1.0f, q);
        },
        T > 1 ? 5 : 200);
    total += s * calls;
  }
  return total * c.num_layers;
}

}  // namespace

// One profiled pass: `reps` prefills and `decode` decode steps after each, a stamp at every site.
Profile profile(Forward& fwd, const Workload& w, const runtime::RuntimeConfig* cfg) {
  const ModelConfig& c = fwd.model().config();
  const int L = c.num_layers;
  constexpr int kS = int(Site::Out) + 1;  // attn_in .. out
  std::vector<Clock::time_point> stamp(size_t(L) * kS);
  std::vector<int> handles;
  for (int s = 0; s < kS; ++s)
    handles.push_back(fwd.hooks().add(Site(s), -1, [&stamp](SiteView& v) {
      stamp[size_t(v.layer) * kS + size_t(v.site)] = Clock::now();
    }));
  const int64_t T = int64_t(w.prompt.size());
  Profile p;
  p.silu_prefill = silu_seconds(T, c.intermediate_size);
  p.silu_decode = silu_seconds(1, c.intermediate_size);
  if (cfg) {
    p.quant_prefill = act_quant_seconds(c, *cfg, T);
    p.quant_decode = act_quant_seconds(c, *cfg, 1);
  }
  auto at = [&](int l, Site s) { return stamp[size_t(l) * kS + size_t(s)]; };
  // Attributes one step [t0, t1] (the layout of the top of this file).
  auto attribute = [&](Clock::time_point t0, Clock::time_point t1, double silu) {
    OpTimes o{};
    Clock::time_point prev = t0;
    for (int l = 0; l < L; ++l) {
      const double norm = secs(prev, at(l, Site::AttnIn));
      o[kNorms] += 2 * norm;
      o[kQkv] += secs(at(l, Site::AttnIn), at(l, Site::KPreRope));
      o[kRope] += secs(at(l, Site::KPreRope), at(l, Site::V));
      o[kAttention] += secs(at(l, Site::V), at(l, Site::OIn));
      o[kOProj] += std::max(0.0, secs(at(l, Site::OIn), at(l, Site::MlpIn)) - norm);
      const double mlp = secs(at(l, Site::MlpIn), at(l, Site::DownIn));
      o[kSilu] += std::min(silu, mlp);
      o[kGateUp] += std::max(0.0, mlp - silu);
      o[kDown] += secs(at(l, Site::DownIn), at(l, Site::Out));
      prev = at(l, Site::Out);
    }
    o[kLmHead] = secs(prev, t1);
    return o;
  };
  const int64_t V = c.vocab_size;
  std::vector<OpTimes> pre, dec;
  std::vector<double> pre_step, dec_step;
  for (int r = 0; r < w.reps; ++r) {
    fwd.reset();
    auto t0 = Clock::now();
    fwd.step(w.prompt, /*all_logits=*/false);
    auto t1 = Clock::now();
    pre.push_back(attribute(t0, t1, p.silu_prefill));
    pre_step.push_back(secs(t0, t1));
    for (int64_t i = 0; i < w.decode; ++i) {
      const int32_t id = decode_token(i, V);
      auto a = Clock::now();
      fwd.step(std::span(&id, 1), /*all_logits=*/false);
      auto b = Clock::now();
      dec.push_back(attribute(a, b, p.silu_decode));
      dec_step.push_back(secs(a, b));
    }
  }
  for (int h : handles) fwd.hooks().remove(h);
  for (int op = 0; op < kNumOps; ++op) {
    std::vector<double> a, b;
    for (const OpTimes& o : pre) a.push_back(o[size_t(op)]);
    for (const OpTimes& o : dec) b.push_back(o[size_t(op)]);
    p.prefill[size_t(op)] = median(a);
    p.decode[size_t(op)] = median(b);
  }
  p.prefill_step = median(pre_step);
  p.decode_step = median(dec_step);
  return p;
}

nlohmann::json profile_json(const Profile& p, bool decode_on) {
  nlohmann::json pre, dec;
  for (int op = 0; op < kNumOps; ++op) {
    pre[kOpKeys[op]] = 1e3 * p.prefill[size_t(op)];
    dec[kOpKeys[op]] = decode_on ? 1e3 * p.decode[size_t(op)] : 0.0;
  }
  return {{"prefill_ms", pre},
          {"decode_ms", dec},
          {"prefill_step_ms", 1e3 * p.prefill_step},
          {"decode_step_ms", decode_on ? 1e3 * p.decode_step : 0.0},
          {"act_quant_est_prefill_ms", 1e3 * p.quant_prefill},
          {"act_quant_est_decode_ms", 1e3 * p.quant_decode},
          {"silu_est_prefill_ms", 1e3 * p.silu_prefill},
          {"silu_est_decode_ms", 1e3 * p.silu_decode}};
}

}  // namespace sinkq::perf
