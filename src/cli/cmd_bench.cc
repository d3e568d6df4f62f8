// sinkq bench (-m DIR | --random 1b) [--dtype bf16] [--prefill N] [--decode N] [--reps R] [--json]
//
// End-to-end speed of the forward pass: prefill tokens/s (one step over N tokens), decode
// tokens/s (one token at a time after the prefill), the weight bytes a decode step streams and the
// bandwidth that implies, against this machine's measured read bandwidth; the cost of the
// activation-site mechanism (a no-op observer at every site vs none); peak memory. Medians over
// repetitions, everything in one run so ratios compare like with like.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "cli/commands.h"
#include "kernels/cpu_features.h"
#include "kernels/membw.h"
#include "model/model.h"
#include "quant/sim.h"

namespace sinkq::cli {
namespace {

using Clock = std::chrono::steady_clock;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

ModelConfig random_config(const std::string& name) {
  ModelConfig c;
  c.architecture = "LlamaForCausalLM";
  c.rms_norm_eps = 1e-5f;
  c.rope_theta = 10000.0f;
  c.bos_token_id = 1;
  c.eos_token_ids = {2};
  if (name == "1b") {  // TinyLlama-1.1B shape
    c.hidden_size = 2048, c.intermediate_size = 5632, c.num_layers = 22, c.num_heads = 32;
    c.num_kv_heads = 4, c.vocab_size = 32000, c.max_position_embeddings = 2048;
  } else if (name == "tiny") {  // for tests of the command itself
    c.hidden_size = 64, c.intermediate_size = 160, c.num_layers = 2, c.num_heads = 4;
    c.num_kv_heads = 2, c.vocab_size = 256, c.max_position_embeddings = 512;
  } else {
    fail("unknown --random shape '{}': expected 1b or tiny", name);
  }
  c.head_dim = c.hidden_size / c.num_heads;
  return c;
}

struct Timing {
  double prefill_tps = 0, decode_tps = 0, decode_ms = 0;
};

// reps x (prefill `np` tokens, then `nd` decode steps); medians over reps of prefill throughput
// and over all decode steps of the per-token time.
Timing run(Forward& fwd, int64_t np, int64_t nd, int reps) {
  const int64_t V = fwd.model().config().vocab_size;
  std::vector<int32_t> prompt(static_cast<size_t>(np));
  for (int64_t i = 0; i < np; ++i) prompt[size_t(i)] = int32_t((i * 7919 + 13) % V);
  std::vector<double> pre, dec;
  for (int r = 0; r < reps; ++r) {
    fwd.reset();
    auto t0 = Clock::now();
    fwd.step(prompt, /*all_logits=*/false);
    pre.push_back(double(np) / std::chrono::duration<double>(Clock::now() - t0).count());
    for (int64_t i = 0; i < nd; ++i) {
      const int32_t id = int32_t((i * 31 + 7) % V);
      auto t1 = Clock::now();
      fwd.step(std::span(&id, 1), /*all_logits=*/false);
      dec.push_back(std::chrono::duration<double>(Clock::now() - t1).count());
    }
  }
  Timing t;
  t.prefill_tps = median(pre);
  t.decode_ms = dec.empty() ? 0 : 1e3 * median(dec);
  t.decode_tps = dec.empty() ? 0 : 1e3 / t.decode_ms;
  return t;
}

}  // namespace

void register_bench(CLI::App& app) {
  struct Opts : CommonFlags {
    std::string random;
    std::string dtype = "bf16";
    int64_t prefill = 512, decode = 64;
    int reps = 3;
    bool no_hook_probe = false;
    std::string sim_preset;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* cmd = app.add_subcommand("bench", "Prefill/decode speed, bandwidth and memory of the forward pass");
  CLI::Option* m = add_model_flag(*cmd, *o, /*required=*/false);
  cmd->add_option("--random", o->random, "Random-weight model of a named shape instead of -m: 1b (hidden 2048, 22 layers, 32/4 heads, ffn 5632, vocab 32000) or tiny")
      ->excludes(m);
  cmd->add_option("--dtype", o->dtype, "Weight dtype of the --random model: f32, bf16, f16")->capture_default_str();
  cmd->add_option("--prefill", o->prefill, "Prompt tokens per prefill")->capture_default_str();
  cmd->add_option("--decode", o->decode, "Decode steps after each prefill")->capture_default_str();
  cmd->add_option("--reps", o->reps, "Repetitions (medians are reported)")->capture_default_str();
  cmd->add_flag("--no-hook-probe", o->no_hook_probe, "Skip the activation-site overhead measurement");
  cmd->add_option("--sim-preset", o->sim_preset,
                  "Also time the simulator's activation and KV fake-quant hooks of this dynamic preset (e.g. "
                  "w4a4kv4) on the same forward, side by side with the plain one (weights unchanged)");
  add_output_flags(*cmd, *o);
  cmd->callback([o] {
    apply_threads(*o);
    SINKQ_CHECK(!o->model.empty() || !o->random.empty(), "bench needs -m DIR or --random SHAPE");
    SINKQ_CHECK(o->prefill >= 1, "--prefill must be >= 1 (got {})", o->prefill);
    SINKQ_CHECK(o->decode >= 0, "--decode must be >= 0 (got {})", o->decode);
    SINKQ_CHECK(o->reps >= 1, "--reps must be >= 1 (got {})", o->reps);
    std::shared_ptr<Model> model;
    std::string name = o->model;
    if (!o->random.empty()) {
      const std::optional<DType> dt = o->dtype == "f32" ? DType::F32 : o->dtype == "bf16" ? DType::BF16 :
                                      o->dtype == "f16" ? std::optional(DType::F16) : std::nullopt;
      SINKQ_CHECK(dt.has_value(), "unknown --dtype '{}': expected f32, bf16 or f16", o->dtype);
      std::fprintf(stderr, "bench: building random %s model (%s)\n", o->random.c_str(), o->dtype.c_str());
      model = Model::random(random_config(o->random), *dt, /*seed=*/1);
      name = "random:" + o->random + ":" + o->dtype;
    } else {
      model = Model::load(o->model);
    }
    const ModelConfig& c = model->config();
    const int64_t ctx = o->prefill + o->decode;
    SINKQ_CHECK(ctx <= c.max_position_embeddings, "--prefill + --decode = {} exceeds the model's {} positions",
                ctx, c.max_position_embeddings);
    Forward fwd(model, ctx, /*max_batch=*/o->prefill);
    std::fprintf(stderr, "bench: %s, %d threads, %s kernels\n", name.c_str(), num_threads(),
                 std::string(isa_name(active_isa())).c_str());
    run(fwd, std::min<int64_t>(o->prefill, 8), 2, 1);  // warm-up: page in weights, spin threads
    const Timing base = run(fwd, o->prefill, o->decode, o->reps);
    Timing hooked;
    if (!o->no_hook_probe) {
      for (int s = 0; s < int(Site::Logits); ++s) fwd.hooks().add(Site(s), -1, [](SiteView&) {});
      hooked = run(fwd, o->prefill, o->decode, o->reps);
      fwd.hooks().clear();
    }
    Timing sim;
    std::string sim_desc;
    if (!o->sim_preset.empty()) {
      quant::SimConfig sc = quant::SimConfig::from_preset(o->sim_preset);
      sc.w.bits = quant::kBitsOff;  // the hooks' cost only: weights stay as they are
      SINKQ_CHECK(sc.a.on() || sc.kv.on(), "--sim-preset {} quantizes no activations or KV: nothing to time",
                  o->sim_preset);
      sim_desc = sc.describe();
      quant::attach(fwd, sc);
      sim = run(fwd, o->prefill, o->decode, o->reps);
      fwd.hooks().clear();
    }
    // Decode reads every weight matrix once plus, per layer, the K and V rows so far (fp32).
    const int64_t wbytes = model->decode_weight_bytes();
    const double avg_ctx = double(o->prefill) + double(o->decode) / 2;
    const double kv_bytes = avg_ctx * double(c.num_layers) * 2.0 * c.kv_dim() * 4.0;
    const double achieved = o->decode > 0 ? (double(wbytes) + kv_bytes) / (base.decode_ms * 1e-3) / 1e9 : 0;
    const int64_t peak_rss = peak_rss_bytes();  // before the bandwidth probe's 1 GiB buffer
    std::fprintf(stderr, "bench: measuring memory read bandwidth\n");
    const double measured = measure_read_bandwidth_gbs();
    nlohmann::json j = {
        {"model", name}, {"threads", num_threads()}, {"isa", isa_name(active_isa())},
        {"parameters", model->weights().parameter_count()},
        {"prefill_tokens", o->prefill}, {"decode_tokens", o->decode}, {"reps", o->reps},
        {"prefill_tokens_per_s", base.prefill_tps}, {"decode_tokens_per_s", base.decode_tps},
        {"decode_ms_per_token", base.decode_ms}, {"decode_weight_bytes", wbytes},
        {"decode_achieved_gbs", achieved}, {"measured_read_gbs", measured},
        {"decode_bandwidth_fraction", measured > 0 ? achieved / measured : 0},
        {"hooked_prefill_tokens_per_s", hooked.prefill_tps}, {"hooked_decode_tokens_per_s", hooked.decode_tps},
        {"kv_cache_bytes", fwd.cache().bytes()}, {"peak_rss_bytes", peak_rss}};
    if (!o->sim_preset.empty())
      j["simulator"] = {{"preset", o->sim_preset}, {"config", sim_desc}, {"prefill_tokens_per_s", sim.prefill_tps},
                        {"decode_tokens_per_s", sim.decode_tps}};
    if (o->json) {
      print_json(j);
      return;
    }
    fmt::print("model {}  ({} params, {} threads, {} kernels)\n", name, model->weights().parameter_count(),
               num_threads(), isa_name(active_isa()));
    fmt::print("prefill {:>5} tokens: {:10.1f} tok/s (median of {})\n", o->prefill, base.prefill_tps, o->reps);
    fmt::print("decode  {:>5} tokens: {:10.2f} tok/s  {:.2f} ms/token (median)\n", o->decode, base.decode_tps,
               base.decode_ms);
    fmt::print("decode bandwidth: {:.1f} GB/s achieved ({:.1f} MB weights/token) vs {:.1f} GB/s measured read = {:.0f}%\n",
               achieved, double(wbytes) / 1e6, measured, measured > 0 ? 100 * achieved / measured : 0.0);
    if (!o->no_hook_probe)
      fmt::print("no-op observer at every site: prefill x{:.3f}, decode x{:.3f} of the unhooked speed\n",
                 hooked.prefill_tps / base.prefill_tps, o->decode ? hooked.decode_tps / base.decode_tps : 1.0);
    if (!o->sim_preset.empty())
      fmt::print("simulator hooks ({}): prefill x{:.3f}, decode x{:.3f} of the plain speed\n", sim_desc,
                 sim.prefill_tps / base.prefill_tps, o->decode ? sim.decode_tps / base.decode_tps : 1.0);
    fmt::print("KV cache {:.1f} MB, peak RSS {:.1f} MB\n", double(fwd.cache().bytes()) / 1e6,
               double(peak_rss) / 1e6);
  });
}

}  // namespace sinkq::cli
