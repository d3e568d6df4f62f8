// sinkq bench (-m DIR | --random 1b|tiny) [--dtype bf16] [--prefill N] [--decode N] [--reps R]
//             [--quant LIST] [--json]
//
// End-to-end speed of the forward pass: prefill tokens/s (one step over N tokens), decode
// tokens/s (one token at a time after the prefill), the weight bytes a decode step streams and the
// bandwidth that implies, against this machine's measured read bandwidth; the cost of the
// activation-site mechanism (a no-op observer at every site vs none); peak memory. Medians over
// repetitions, everything in one run so ratios compare like with like.
//
// --quant fp32,w8a8,w4a8,w4a8kv4,... runs the same workload on packed low-bit models (runtime::pack_model:
// real int8 / int4 linears on the lowbit kernels) side by side with the fp32 engine, and adds a
// per-op profile of every configuration. Names: `fp32` (the model as loaded: fp32 compute on its
// weight dtype) or any name quant::Recipe::from_preset knows (the presets without calibration,
// and the short names w{8|4}a{8|4}[kv{8|4}][-g{32|64|128}][-asym][-static][-head8|-head4], recipe.h):
//   w8 / w4    int8 / int4 weights, one scale per output channel, or per group of 32/64/128 input
//              columns (-gN; 4-bit only), symmetric or asymmetric (-asym, 4-bit groups only)
//   a8 / a4    int8 / int4 activations at the inputs of q/k/v, o, gate/up and down: dynamic per-token
//              scales, or static per-tensor ones (-static), calibrated by plain abs-max
//              (quant::calibrate_static_max, clip 1) on one fp32 prefill of the same synthetic
//              tokens: bench measures speed, whose figures do not depend on the scale values
//   kv8 / kv4  the packed int8 / int4 KV cache (runtime/packed_kv.h), dynamic per (token, KV head);
//              without it the KV cache stays fp32
//   -head8     embeddings and lm_head in int8 (W8 per row, the head's input int8 per token)
//   -head4     embeddings and lm_head in int4 (W4 g32, the head's input int8 per token)
// Embeddings and lm_head are otherwise held as `sinkq quantize --fp-dtype` would store them (--fp-dtype,
// default auto: f16 for an fp32 source); norms, RoPE and attention stay fp32. The fp32
// configuration always runs (first): ratios are to it.
//
// --kv-only --ctx N[,N...] [--kv fp32,int8,int4,nuq4,nuq3-1pct,...] times one decode step's
// attention over a synthetic KV cache of N tokens of the shape (--random, default 1b, or -m's
// config.json or GGUF metadata: no weights are loaded), per storage, with bytes per token, total KV memory, fill
// time and ms per token; a storage that does not fit in MemAvailable is reported with what it
// would need and skipped (perf/kv_only.h).
//
// The workloads, timing and memory probes are perf/bench.h; the per-op profile is perf/profile.h.
#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <array>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <optional>
#include <span>
#include <string>

#include "cli/commands.h"
#include "dist/mpi.h"
#include "core/error.h"
#include "formats/quantizer.h"
#include "kernels/cpu_features.h"
#include "kernels/membw.h"
#include "kernels/ops.h"
#include "lowbit/kernels.h"
#include "model/model.h"
#include "perf/bench.h"
#include "perf/kv_only.h"
#include "perf/profile.h"
#include "quant/calibrate.h"
#include "quant/sim.h"
#include "runtime/artifact.h"
#include "runtime/packed_linear.h"
#include "runtime/quantized_model.h"
#include "sinkq/engine.h"

namespace sinkq::cli {
namespace {

using namespace perf;

// ---- the configurations ---------------------------------------------------------------------

struct QuantChoice {
  std::string name;
  bool fp = true;        // the model as loaded
  quant::Recipe recipe;  // !fp: quant::Recipe::from_preset(name), static scales by plain abs-max
};

QuantChoice parse_quant(const std::string& name) {
  QuantChoice q;
  q.name = name;
  if (name == "fp32") return q;
  q.fp = false;
  try {
    q.recipe = quant::Recipe::from_preset(name);
    // Speed only: static scales by abs-max on one fp32 prefill (quant::calibrate_static_max), no
    // grid search, no rotation or prefix (a preset that needs calibration data is refused below).
    if (q.recipe.act_static()) {
      q.recipe.a.clip_grid = false;
      q.recipe.a.clip = 1.0f;
    }
    SINKQ_CHECK(!q.recipe.rotate.on && !q.recipe.prefix.requested() && !q.recipe.weight_clip_grid() &&
                    !q.recipe.kv_static(),
                "bench times packed configurations without calibration data: rotation, prefixes, the weight clip "
                "grid and static KV need 'sinkq quantize' (then bench the artifact with -m)");
    runtime::check_runnable(q.recipe);
  } catch (const Error& e) {
    fail("--quant {}: {}", name, e.what());
  }
  return q;
}

std::vector<QuantChoice> parse_quant_list(const std::string& list) {
  std::vector<QuantChoice> out;
  size_t p = 0;
  while (p <= list.size()) {
    const size_t c = std::min(list.find(',', p), list.size());
    const std::string item = list.substr(p, c - p);
    SINKQ_CHECK(!item.empty(), "--quant: empty configuration name in '{}'", list);
    for (const QuantChoice& q : out) SINKQ_CHECK(q.name != item, "--quant: '{}' is listed twice", item);
    out.push_back(parse_quant(item));
    p = c + 1;
  }
  // fp32 first: the reference of every ratio.
  auto it = std::find_if(out.begin(), out.end(), [](const QuantChoice& q) { return q.fp; });
  if (it == out.end()) out.insert(out.begin(), parse_quant("fp32"));
  else std::rotate(out.begin(), it, it + 1);
  return out;
}

// ---- one configuration ----------------------------------------------------------------------

struct Result {
  std::string name, describe;
  Timing t;
  Profile prof;
  int64_t decode_weight_bytes = 0, model_bytes = 0, peak_rss = 0;
  double pack_s = 0, calib_s = 0;
  double achieved_gbs = 0;
  double kv_row_bytes = 0;  // KV bytes per cached token (all layers, K and V)
};

// --kv-only: the storages at every context, one table.
template <class Opts>
void run_kv_only_bench(const Opts& o) {
  SINKQ_CHECK(o.quant.empty() && o.sim_preset.empty(), "--kv-only times the KV cache alone: drop --quant / --sim-preset");
  ModelConfig c;
  std::string name;
  if (!o.model.empty()) {
    c = model_config_of(o.model);  // a model directory's config.json or a GGUF file's metadata
    name = o.model;
  } else {
    const std::string shape = o.random.empty() ? "1b" : o.random;
    c = random_config(shape);
    name = "shape:" + shape;
  }
  std::vector<int64_t> ctxs;
  {
    size_t a = 0;
    while (a <= o.ctx_list.size()) {
      const size_t b = std::min(o.ctx_list.find(',', a), o.ctx_list.size());
      ctxs.push_back(parse_decimal(o.ctx_list.substr(a, b - a), 1, INT32_MAX, "--ctx"));
      a = b + 1;
    }
  }
  const std::vector<KvOnlyStorage> storages = parse_kv_storages(o.kv);
  std::fprintf(stderr, "bench --kv-only: %s (%d layers, %d/%d heads, head_dim %d), %d threads, %s kernels\n",
               name.c_str(), c.num_layers, c.num_heads, c.num_kv_heads, c.head_dim, num_threads(),
               std::string(isa_name(active_isa())).c_str());
  std::vector<KvOnlyResult> res;
  for (int64_t ctx : ctxs)
    for (const KvOnlyStorage& s : storages) {
      res.push_back(run_kv_only(c, s, ctx, o.reps));
      if (!res.back().skipped.empty())
        std::fprintf(stderr, "bench --kv-only: %s at ctx %lld skipped: %s\n", s.name.c_str(), (long long)ctx,
                     res.back().skipped.c_str());
    }
  std::fprintf(stderr, "bench: measuring memory read bandwidth\n");
  const double measured = measure_read_bandwidth_gbs(size_t(o.bw_probe_mib) << 20);
  if (o.json) {
    nlohmann::json arr = nlohmann::json::array();
    for (const KvOnlyResult& r : res)
      arr.push_back({{"storage", r.name}, {"config", r.describe}, {"ctx", r.ctx}, {"timed", r.timed},
                     {"skipped", r.skipped}, {"bytes_per_token", r.bytes_per_token},
                     {"kv_bytes", r.bytes_per_token * double(r.ctx)}, {"need_bytes", r.need_bytes},
                     {"mem_available_bytes", r.available_bytes}, {"fill_seconds", r.fill_s},
                     {"ms_per_token", r.ms_per_token}, {"achieved_gbs", r.gbs},
                     {"bandwidth_fraction", measured > 0 && r.timed ? r.gbs / measured : 0.0},
                     {"outliers", r.outliers}});
    print_json({{"shape", name}, {"layers", c.num_layers}, {"heads", c.num_heads}, {"kv_heads", c.num_kv_heads},
                {"head_dim", c.head_dim}, {"threads", num_threads()}, {"isa", isa_name(active_isa())},
                {"cpu", cpu_description()}, {"measured_read_gbs", measured}, {"reps", o.reps}, {"results", arr}});
    return;
  }
  fmt::print("decode attention over a synthetic KV cache: {} ({} layers, {}/{} heads, head_dim {}), {} threads, {} "
             "kernels, measured read bandwidth {:.1f} GB/s\nhost: {}\n\n",
             name, c.num_layers, c.num_heads, c.num_kv_heads, c.head_dim, num_threads(), isa_name(active_isa()),
             measured, cpu_description());
  fmt::print("{:<12} {:>9} {:>10} {:>10} {:>9} {:>11} {:>7} {:>6}  {}\n", "storage", "ctx", "B/token", "KV GB",
             "fill s", "ms/token", "GB/s", "% bw", "note");
  for (const KvOnlyResult& r : res) {
    if (!r.timed) {
      fmt::print("{:<12} {:>9} {:>10.0f} {:>10.3f} {:>9} {:>11} {:>7} {:>6}  {}\n", r.name, r.ctx, r.bytes_per_token,
                 r.bytes_per_token * double(r.ctx) / 1e9, "-", "-", "-", "-",
                 r.skipped.empty() ? std::string("bytes only") : "not run: " + r.skipped);
      continue;
    }
    fmt::print("{:<12} {:>9} {:>10.0f} {:>10.3f} {:>9.1f} {:>11.2f} {:>7.1f} {:>5.0f}%  {}\n", r.name, r.ctx,
               r.bytes_per_token, r.bytes_per_token * double(r.ctx) / 1e9, r.fill_s, r.ms_per_token, r.gbs,
               measured > 0 ? 100 * r.gbs / measured : 0.0, r.describe);
  }
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
    std::string quant;
    bool no_profile = false;
    int64_t bw_probe_mib = 1024;
    std::string fp_dtype = "auto";
    bool kv_only = false;
    std::string ctx_list = "4096,32768,131072";
    std::string kv = "fp32,int8,int4,nuq4,nuq3-1pct,nuq2-1pct";
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
  cmd->add_option("--quant", o->quant,
                  "Comma-separated configurations run side by side on real packed low-bit linears, with a "
                  "per-op profile: fp32 (always run, first) and w{8|4}a{8|4}[kv{8|4}][-g{32|64|128}][-asym][-static]"
                  "[-head8|-head4], e.g. fp32,w8a8,w4a8,w4a4,w8a8-static,w4a8-head8 (-static: per-tensor activation scales "
                  "calibrated on one fp32 prefill of the same tokens; -head8 / -head4: embeddings and lm_head in int8 / "
                  "int4 g32)");
  cmd->add_flag("--no-profile", o->no_profile, "With --quant: skip the per-op profile pass");
  cmd->add_option("--fp-dtype", o->fp_dtype,
                  "With --quant: embeddings / lm_head of the packed configs, as 'sinkq quantize --fp-dtype' stores "
                  "them: auto (the model's if 16-bit, else f16) | f32 | f16 | bf16")
      ->capture_default_str();
  cmd->add_option("--bw-probe-mib", o->bw_probe_mib,
                  "Buffer of the memory read-bandwidth probe in MiB (well above the last-level cache)")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 20))
      ->capture_default_str();
  cmd->add_flag("--kv-only", o->kv_only,
                "Time one decode step's attention over a synthetic KV cache of --ctx tokens per --kv storage (no "
                "weights: the shape of --random, default 1b, or of -m's config: config.json or GGUF metadata)");
  cmd->add_option("--ctx", o->ctx_list, "With --kv-only: comma-separated context lengths")->capture_default_str();
  cmd->add_option("--kv", o->kv,
                  "With --kv-only: comma-separated KV storages: fp32, fp16 (bytes only), int8, int4, nuq4, nuq3, "
                  "nuq2, nuqN-1pct (1% outliers)")
      ->capture_default_str();
  add_output_flags(*cmd, *o);
  cmd->callback([o] {
    apply_threads(*o);
    if (o->kv_only) return run_kv_only_bench(*o);
    SINKQ_CHECK(!o->model.empty() || !o->random.empty(), "bench needs -m DIR or --random SHAPE");
    SINKQ_CHECK(o->prefill >= 1, "--prefill must be >= 1 (got {})", o->prefill);
    SINKQ_CHECK(o->decode >= 0, "--decode must be >= 0 (got {})", o->decode);
    SINKQ_CHECK(o->reps >= 1, "--reps must be >= 1 (got {})", o->reps);
    const std::vector<QuantChoice> choices = o->quant.empty() ? std::vector<QuantChoice>{} : parse_quant_list(o->quant);
    SINKQ_CHECK(o->fp_dtype == "auto" || o->fp_dtype == "f32" || o->fp_dtype == "f16" || o->fp_dtype == "bf16",
                "unknown --fp-dtype '{}': expected auto, f32, f16 or bf16", o->fp_dtype);
    std::shared_ptr<const Model> model;
    std::string name = o->model;
    // -m may be a sinkq artifact: it is timed as it runs (packed linears and KV cache, online
    // rotations, its prefix in front); it is already quantized, so --quant / --sim-preset do not apply.
    std::shared_ptr<const Engine> art;
    // Under mpirun (dist/pipeline.h): -m's stages over the ranks, timed end to end on rank 0.
    const bool pipeline = dist::active();
    if (pipeline)
      SINKQ_CHECK(!o->model.empty() && o->random.empty() && choices.empty() && o->sim_preset.empty(),
                  "under mpirun, bench times -m MODEL|ARTIFACT through the pipeline: --random, --quant and "
                  "--sim-preset run in one process");
    if (pipeline || (!o->model.empty() && runtime::is_artifact(o->model))) {
      SINKQ_CHECK(choices.empty() && o->sim_preset.empty(),
                  "-m {} is a sinkq artifact (already quantized): --quant and --sim-preset apply to a model directory "
                  "or --random; bench the artifact alone, or its source model with --quant",
                  o->model);
      art = Engine::open(o->model);  // under mpirun: the ranks after the first serve their stage from here
      model = art->model();
      name = art->describe();
      if (pipeline) name += fmt::format(" (pipeline of {} ranks, rank 0 holds layers [{}, {}))", dist::size(),
                                        model->stage().begin, model->stage().end);
    } else if (!o->random.empty()) {
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
    const Workload work = make_workload(c.vocab_size, o->prefill, o->decode, o->reps);
    const Workload warm = make_workload(c.vocab_size, std::min<int64_t>(o->prefill, 8), 2, 1);
    const bool peak_resettable = reset_peak_rss();
    Forward fwd(model, ctx, /*max_batch=*/o->prefill);
    if (art) art->attach(fwd);  // its rotations, packed KV cache and prefix
    std::fprintf(stderr, "bench: %s, %d threads, %s kernels, lowbit %s\n", name.c_str(), num_threads(),
                 std::string(isa_name(active_isa())).c_str(), std::string(lowbit::kernel_isa_name()).c_str());
    run(fwd, warm);  // warm-up: page in weights, spin threads
    std::fprintf(stderr, "bench: fp32: timing\n");
    const Timing base = run(fwd, work);
    Timing hooked;
    if (!o->no_hook_probe && !pipeline) {  // (the hooks of rank 0's stage alone would say little)
      std::vector<int> probe;  // only these go again: an artifact's rotation hooks stay
      for (int s = 0; s < int(Site::Logits); ++s) probe.push_back(fwd.hooks().add(Site(s), -1, [](SiteView&) {}));
      hooked = run(fwd, work);
      for (int h : probe) fwd.hooks().remove(h);
    }
    Timing sim;
    std::string sim_desc;
    if (!o->sim_preset.empty()) {
      quant::Recipe sc = quant::Recipe::from_preset(o->sim_preset);
      sc.w.bits = quant::kBitsOff;  // the hooks' cost only: weights stay as they are
      SINKQ_CHECK(sc.a.on() || sc.kv.on(), "--sim-preset {} quantizes no activations or KV: nothing to time",
                  o->sim_preset);
      sim_desc = sc.describe();
      const std::vector<int> sim_hooks = quant::attach(fwd, sc);
      sim = run(fwd, work);
      for (int h : sim_hooks) fwd.hooks().remove(h);
    }
    // Decode reads every weight matrix once (packed linears: their codes, scales and zeros) plus,
    // per layer, the K and V rows so far (fp32, or the packed store's bytes per row).
    const int64_t wbytes = model->decode_weight_bytes();
    const double avg_ctx = double(o->prefill) + double(o->decode) / 2;
    auto gbs = [&](int64_t bytes, double kv_row, double ms) {
      return o->decode > 0 ? (double(bytes) + avg_ctx * kv_row) / (ms * 1e-3) / 1e9 : 0.0;
    };
    const double achieved = gbs(wbytes, kv_row_bytes_of(fwd), base.decode_ms);

    // --quant: every configuration on the same workload, fp32 first.
    std::vector<Result> results;
    std::map<int, std::vector<quant::StaticQuant>> static_scales;  // by activation bits
    for (const QuantChoice& q : choices) {
      Result r;
      r.name = q.name;
      if (q.fp) {
        r.describe = "fp32 compute, " + std::string(dtype_name(model->weights().layers[0].mat(LinearRole::Q).dtype)) + " weights";
        r.t = base;
        if (!o->no_profile) {
          std::fprintf(stderr, "bench: fp32: profile\n");
          r.prof = profile(fwd, work, nullptr);
        }
        weight_bytes(*model, r.decode_weight_bytes, r.model_bytes);
        r.peak_rss = proc_status_bytes("VmHWM:");
      } else {
        std::vector<quant::StaticQuant> statics;
        if (q.recipe.act_static()) {
          auto it = static_scales.find(q.recipe.a.bits);
          if (it == static_scales.end()) {
            std::fprintf(stderr, "bench: calibrating static int%d activation scales (one fp32 prefill of %lld tokens)\n",
                         q.recipe.a.bits, (long long)o->prefill);
            const auto t0 = Clock::now();
            it = static_scales.emplace(q.recipe.a.bits, quant::calibrate_static_max(fwd, q.recipe, work.prompt)).first;
            r.calib_s = secs(t0, Clock::now());
          }
          statics = it->second;
        }
        const runtime::RuntimeConfig cfg = runtime::runtime_config(q.recipe, statics);
        r.describe = cfg.describe();
        if (peak_resettable) reset_peak_rss();
        std::fprintf(stderr, "bench: %s: packing (%s)\n", q.name.c_str(), r.describe.c_str());
        const auto t0 = Clock::now();
        std::shared_ptr<const Model> packed = runtime::pack_model(model, cfg);
        // Embeddings / lm_head as the artifact of this configuration would hold them.
        const DType src_dt = model->weights().lm_head.dtype;
        const DType fp_dt = o->fp_dtype == "f32"    ? DType::F32
                            : o->fp_dtype == "f16"  ? DType::F16
                            : o->fp_dtype == "bf16" ? DType::BF16
                            : src_dt == DType::F32 || dtype_is_block(src_dt) ? DType::F16
                                                                             : src_dt;
        packed = runtime::with_fp_dtype(packed, fp_dt);  // (an int8 head has no fp table: unchanged)
        if (!cfg.head.on()) r.describe += fmt::format(" | embeddings / lm_head {}", dtype_name(fp_dt));
        r.pack_s = secs(t0, Clock::now());
        {
          Forward qf(packed, ctx, /*max_batch=*/o->prefill);
          if (q.recipe.kv.on()) {
            const runtime::KvScheme ks = runtime::KvScheme::from_sim(q.recipe.kv);  // dynamic: no calibration
            runtime::attach_packed_kv(qf, ks);
            r.describe += " | " + ks.describe();
          }
          r.kv_row_bytes = kv_row_bytes_of(qf);
          run(qf, warm);
          std::fprintf(stderr, "bench: %s: timing\n", q.name.c_str());
          r.t = run(qf, work);
          if (!o->no_profile) {
            std::fprintf(stderr, "bench: %s: profile\n", q.name.c_str());
            r.prof = profile(qf, work, &cfg);
          }
        }
        weight_bytes(*packed, r.decode_weight_bytes, r.model_bytes);
        r.peak_rss = proc_status_bytes("VmHWM:");
      }
      if (q.fp) r.kv_row_bytes = kv_row_bytes_of(fwd);
      r.achieved_gbs = gbs(r.decode_weight_bytes, r.kv_row_bytes, r.t.decode_ms);
      results.push_back(std::move(r));
    }

    const int64_t peak_rss = peak_rss_bytes();  // before the bandwidth probe's 1 GiB buffer
    std::fprintf(stderr, "bench: measuring memory read bandwidth\n");
    const double measured = measure_read_bandwidth_gbs(size_t(o->bw_probe_mib) << 20);
    nlohmann::json j = {
        {"model", name}, {"threads", num_threads()}, {"isa", isa_name(active_isa())},
        {"lowbit_isa", lowbit::kernel_isa_name()}, {"cpu", cpu_description()}, {"sgemm", sgemm_backend(active_isa())},
        {"parameters", model->weights().parameter_count(model->config())},
        {"prefill_tokens", o->prefill}, {"decode_tokens", o->decode}, {"reps", o->reps},
        {"prefill_tokens_per_s", base.prefill_tps}, {"decode_tokens_per_s", base.decode_tps},
        {"decode_ms_per_token", base.decode_ms}, {"decode_weight_bytes", wbytes},
        {"decode_achieved_gbs", achieved}, {"measured_read_gbs", measured},
        {"decode_bandwidth_fraction", measured > 0 ? achieved / measured : 0},
        {"hooked_prefill_tokens_per_s", hooked.prefill_tps}, {"hooked_decode_tokens_per_s", hooked.decode_tps},
        {"kv_cache_bytes", fwd.kv_bytes()}, {"artifact", art != nullptr}, {"peak_rss_bytes", peak_rss}};
    if (pipeline)  // decode_weight_bytes, kv_cache_bytes and peak_rss_bytes are then rank 0's
      j["pipeline"] = {{"ranks", dist::size()}, {"rank0_layers", {model->stage().begin, model->stage().end}}};
    if (!o->sim_preset.empty())
      j["simulator"] = {{"preset", o->sim_preset}, {"config", sim_desc}, {"prefill_tokens_per_s", sim.prefill_tps},
                        {"decode_tokens_per_s", sim.decode_tps}};
    if (!results.empty()) {
      const Result& f = results.front();
      nlohmann::json arr = nlohmann::json::array();
      for (const Result& r : results) {
        nlohmann::json e = {
            {"name", r.name}, {"config", r.describe},
            {"prefill_tokens_per_s", r.t.prefill_tps}, {"decode_tokens_per_s", r.t.decode_tps},
            {"decode_ms_per_token", r.t.decode_ms},
            {"prefill_ratio_to_fp32", r.t.prefill_tps / f.t.prefill_tps},
            {"decode_ratio_to_fp32", o->decode ? r.t.decode_tps / f.t.decode_tps : 0.0},
            {"decode_weight_bytes", r.decode_weight_bytes}, {"decode_achieved_gbs", r.achieved_gbs},
            {"decode_bandwidth_fraction", measured > 0 ? r.achieved_gbs / measured : 0},
            {"model_bytes", r.model_bytes}, {"peak_rss_bytes", r.peak_rss},
            {"kv_bytes_per_token", r.kv_row_bytes},
            {"pack_seconds", r.pack_s}, {"calibration_seconds", r.calib_s}};
        if (!o->no_profile) e["profile"] = profile_json(r.prof, o->decode > 0);
        arr.push_back(e);
      }
      j["configs"] = arr;
      j["peak_rss_note"] = peak_resettable
                               ? "per config: the peak RSS from just before packing it to the end of its runs (the "
                                 "process holds the fp32 model throughout: pack_model keeps it alive)"
                               : "per config: the process's peak RSS so far (could not reset it)";
    }
    if (o->json) {
      print_json(j);
      return;
    }
    fmt::print("model {}  ({} params, {} threads, {} kernels, lowbit {})\nhost: {}; sgemm: {}\n", name,
               model->weights().parameter_count(model->config()), num_threads(), isa_name(active_isa()), lowbit::kernel_isa_name(),
               cpu_description(), sgemm_backend(active_isa()));
    fmt::print("prefill {:>5} tokens: {:10.1f} tok/s (median of {})\n", o->prefill, base.prefill_tps, o->reps);
    fmt::print("decode  {:>5} tokens: {:10.2f} tok/s  {:.2f} ms/token (median)\n", o->decode, base.decode_tps,
               base.decode_ms);
    fmt::print("decode bandwidth: {:.1f} GB/s achieved ({:.1f} MB weights/token{}) vs {:.1f} GB/s measured read = {:.0f}%\n",
               achieved, double(wbytes) / 1e6, pipeline ? " of rank 0's stage" : "", measured,
               measured > 0 ? 100 * achieved / measured : 0.0);
    if (!o->no_hook_probe && !pipeline)
      fmt::print("no-op observer at every site: prefill x{:.3f}, decode x{:.3f} of the unhooked speed\n",
                 hooked.prefill_tps / base.prefill_tps, o->decode ? hooked.decode_tps / base.decode_tps : 1.0);
    if (!o->sim_preset.empty())
      fmt::print("simulator hooks ({}): prefill x{:.3f}, decode x{:.3f} of the plain speed\n", sim_desc,
                 sim.prefill_tps / base.prefill_tps, o->decode ? sim.decode_tps / base.decode_tps : 1.0);
    fmt::print("KV cache {:.1f} MB{}, peak RSS {:.1f} MB\n", double(fwd.kv_bytes()) / 1e6,
               fwd.kv_store() ? " (" + fwd.kv_store()->describe() + ")" : std::string(),
               double(peak_rss) / 1e6);
    if (results.empty()) return;
    const Result& f = results.front();
    fmt::print("\n{:<14} {:>10} {:>7} {:>10} {:>7} {:>11} {:>7} {:>6} {:>9} {:>9}\n", "config", "prefill/s", "x fp32",
               "decode/s", "x fp32", "MB/token", "GB/s", "% bw", "model MB", "peak MB");
    for (const Result& r : results)
      fmt::print("{:<14} {:>10.1f} {:>7.2f} {:>10.2f} {:>7.2f} {:>11.1f} {:>7.1f} {:>5.0f}% {:>9.1f} {:>9.1f}\n", r.name,
                 r.t.prefill_tps, r.t.prefill_tps / f.t.prefill_tps, r.t.decode_tps,
                 o->decode ? r.t.decode_tps / f.t.decode_tps : 0.0, double(r.decode_weight_bytes) / 1e6,
                 r.achieved_gbs, measured > 0 ? 100 * r.achieved_gbs / measured : 0.0, double(r.model_bytes) / 1e6,
                 double(r.peak_rss) / 1e6);
    if (o->no_profile) return;
    for (int phase = 0; phase < (o->decode ? 2 : 1); ++phase) {
      fmt::print("\nper-op profile, {} (ms per {}; medians)\n{:<24}", phase ? "decode" : "prefill",
                 phase ? "token" : fmt::format("{}-token prefill", o->prefill), "op");
      for (const Result& r : results) fmt::print(" {:>12}", r.name);
      fmt::print("\n");
      auto row = [&](const char* label, auto get) {
        fmt::print("{:<24}", label);
        for (const Result& r : results) fmt::print(" {:>12.3f}", 1e3 * get(r));
        fmt::print("\n");
      };
      for (int op = 0; op < kNumOps; ++op)
        row(kOpNames[op], [&](const Result& r) { return (phase ? r.prof.decode : r.prof.prefill)[size_t(op)]; });
      row("sum of ops", [&](const Result& r) {
        double s = 0;
        for (double v : (phase ? r.prof.decode : r.prof.prefill)) s += v;
        return s;
      });
      row("profiled step", [&](const Result& r) { return phase ? r.prof.decode_step : r.prof.prefill_step; });
      row("  act quant (est.)", [&](const Result& r) { return phase ? r.prof.quant_decode : r.prof.quant_prefill; });
    }
  });
}

}  // namespace sinkq::cli
