// sinkq ppl -m DIR -f FILE [--ctx N] [--protocol gptq|bos] [--max-windows K] [--json]
//           [--preset P] [--w-bits N] [--w-group G] [--w-asym] [--w-clip R|grid]
//           [--a-bits N] [--a-quant dynamic|static|cross] [--a-asym] [--a-clip R|grid]
//           [--a-alpha A] [--a-cross-cols per_call|running_max]
//           [--kv-bits N] [--kv-quant dynamic|static] [--kv-gran token|head|tensor] [--kv-clip R|grid]
//           [--rotate] [--rotate-seed S]
//           [--calib FILE] [--calib-samples N] [--calib-len L] [--calib-seed S] [--kld]
// The quantization flags build a quant::SimConfig (preset first, then each given flag overrides
// its field); quant::build_sim then rotates, searches clip ratios / static scales on the
// calibration samples (when the config needs them), and fake-quantizes the weights once;
// activations / KV are quantized through site hooks.
#include <fmt/format.h>

#include <cmath>
#include <cstdio>
#include <memory>

#include "cli/commands.h"
#include "core/mmap.h"
#include "eval/calib_data.h"
#include "eval/ppl.h"
#include "quant/sim.h"
#include "tokenizer/tokenizer.h"

namespace sinkq::cli {

void register_ppl(CLI::App& app) {
  struct Opts : CommonFlags {
    std::string file;
    int64_t ctx = 0;
    std::string protocol = "gptq";
    int64_t max_windows = 0;
    // Quantization (sim.h); a flag's value is used only when the flag was given.
    std::string preset = "fp16";
    int w_bits = 16, w_group = 0, a_bits = 16, kv_bits = 16;
    bool w_asym = false, a_asym = false, kld = false, rotate = false;
    float a_alpha = 0.15f;
    std::string w_clip = "1", a_clip = "grid", kv_clip = "grid";
    std::string a_quant = "dynamic", a_cross_cols = "per_call", kv_quant = "dynamic", kv_gran = "head";
    uint64_t rotate_seed = 0, calib_seed = 0;
    std::string calib;
    int64_t calib_samples = 8, calib_len = 0;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* cmd = app.add_subcommand("ppl", "Perplexity of a text file over non-overlapping windows");
  add_model_flag(*cmd, *o);
  cmd->add_option("-f,--file", o->file, "Text file (UTF-8; CRLF is read as LF); tokenized once, whole")->required();
  cmd->add_option("--ctx", o->ctx, "Window length in tokens (default: min(2048, max_position_embeddings))");
  cmd->add_option("--protocol", o->protocol,
                  "gptq: [BOS]+text cut into windows (the papers' protocol); bos: every window is BOS + ctx-1 text tokens")
      ->capture_default_str();
  cmd->add_option("--max-windows", o->max_windows, "Score at most K windows (0 = all)")->capture_default_str();
  std::string presets;
  for (const auto& n : quant::SimConfig::preset_names()) presets += (presets.empty() ? "" : "|") + n;
  cmd->add_option("--preset", o->preset, "Quantization preset (" + presets + "); flags below override it")
      ->capture_default_str();
  auto* w_bits = cmd->add_option("--w-bits", o->w_bits, "Weight bits: 2..8, 16 = full precision");
  auto* w_group = cmd->add_option("--w-group", o->w_group, "Weight group size along the input (0 = per output channel)");
  auto* w_asym = cmd->add_flag("--w-asym", o->w_asym, "Asymmetric weight quantization (default symmetric)");
  auto* w_clip = cmd->add_option("--w-clip", o->w_clip,
                                 "Weight clip ratio in (0, 1] (default 1), or 'grid': per output channel / group, "
                                 "searched on the layer output (needs --calib)");
  auto* a_bits = cmd->add_option("--a-bits", o->a_bits, "Bits of the linear layers' inputs: 2..8, 16 = full precision");
  auto* a_quant = cmd->add_option("--a-quant", o->a_quant,
                                  "dynamic (per-token) | cross (CrossQuant) | static (per-tensor, calibrated: needs --calib)");
  auto* a_asym = cmd->add_flag("--a-asym", o->a_asym, "Asymmetric activation quantization (dynamic or static; default symmetric)");
  auto* a_clip = cmd->add_option("--a-clip", o->a_clip,
                                 "Static activations: clip ratio in (0, 1] or 'grid' (default: searched on the block output)");
  auto* a_alpha = cmd->add_option("--a-alpha", o->a_alpha, "CrossQuant alpha in [0, 1] (default 0.15)");
  auto* a_cross_cols = cmd->add_option("--a-cross-cols", o->a_cross_cols,
                                       "CrossQuant column maxima: per_call (default, the paper's) | running_max (causal)");
  auto* kv_bits = cmd->add_option("--kv-bits", o->kv_bits, "KV cache bits: 2..8, 16 = full precision");
  auto* kv_quant = cmd->add_option("--kv-quant", o->kv_quant, "KV scales: dynamic (default) | static (calibrated: needs --calib)");
  auto* kv_gran = cmd->add_option("--kv-gran", o->kv_gran,
                                  "KV scale granularity: token (dynamic only) | head (default) | tensor (static only)");
  auto* kv_clip = cmd->add_option("--kv-clip", o->kv_clip,
                                  "Static KV: clip ratio in (0, 1] or 'grid' (default: searched on the block output)");
  cmd->add_flag("--rotate", o->rotate, "Hadamard rotation (QuaRot R1-R4, computationally invariant) before quantizing");
  auto* rotate_seed = cmd->add_option("--rotate-seed", o->rotate_seed, "Seed of the random Hadamard signs (default 0)");
  auto* calib = cmd->add_option("--calib", o->calib,
                                "Calibration text (jsonl with \"text\" per line, e.g. C4, or plain text) for --w-clip grid, "
                                "--a-quant static, --kv-quant static");
  auto* calib_samples = cmd->add_option("--calib-samples", o->calib_samples, "Calibration samples N (default 8)");
  auto* calib_len = cmd->add_option("--calib-len", o->calib_len,
                                    "Tokens per calibration sample incl. BOS (default min(512, max_position_embeddings))");
  auto* calib_seed = cmd->add_option("--calib-seed", o->calib_seed, "Seed of the calibration sampling (default 0)");
  cmd->add_flag("--kld", o->kld, "Also KL(p_fp || p_quant) of the next-token distributions (runs the fp model too)");
  add_output_flags(*cmd, *o);
  // Preset, then every given flag over it; every value checked, errors name the flag.
  auto make_config = [=] {
    quant::SimConfig c = quant::SimConfig::from_preset(o->preset);
    if (w_bits->count()) c.w.bits = quant::parse_bits("--w-bits", o->w_bits);
    if (w_group->count()) {
      SINKQ_CHECK(o->w_group >= 0, "--w-group must be >= 0 (0 = per output channel), got {}", o->w_group);
      c.w.group = o->w_group;
    }
    if (w_asym->count()) c.w.symmetric = !o->w_asym;
    if (w_clip->count()) {
      const quant::ClipSetting cs = quant::parse_clip("--w-clip", o->w_clip);
      c.w.clip_grid = cs.grid;
      c.w.clip = cs.ratio;
    }
    if (a_bits->count()) c.a.bits = quant::parse_bits("--a-bits", o->a_bits);
    if (a_quant->count()) c.a.mode = quant::parse_act_mode(o->a_quant);
    if (a_asym->count()) c.a.symmetric = !o->a_asym;
    if (a_clip->count()) {
      SINKQ_CHECK(c.a.mode == quant::ActMode::Static, "--a-clip applies to --a-quant static only");
      const quant::ClipSetting cs = quant::parse_clip("--a-clip", o->a_clip);
      c.a.clip_grid = cs.grid;
      c.a.clip = cs.ratio;
    }
    if (a_alpha->count()) c.a.alpha = o->a_alpha;
    if (a_cross_cols->count()) {
      SINKQ_CHECK(o->a_cross_cols == "per_call" || o->a_cross_cols == "running_max",
                  "unknown --a-cross-cols '{}': expected per_call or running_max", o->a_cross_cols);
      c.a.cross_columns = quant::parse_column_mode(o->a_cross_cols);
    }
    if (kv_bits->count()) c.kv.bits = quant::parse_bits("--kv-bits", o->kv_bits);
    if (kv_quant->count()) c.kv.mode = quant::parse_kv_mode(o->kv_quant);
    if (kv_gran->count()) c.kv.granularity = quant::parse_kv_granularity(o->kv_gran);
    if (kv_clip->count()) {
      SINKQ_CHECK(c.kv.mode == quant::KvMode::Static, "--kv-clip applies to --kv-quant static only");
      const quant::ClipSetting cs = quant::parse_clip("--kv-clip", o->kv_clip);
      c.kv.clip_grid = cs.grid;
      c.kv.clip = cs.ratio;
    }
    if (rotate_seed->count()) SINKQ_CHECK(o->rotate, "--rotate-seed needs --rotate");
    c.rotate.on = o->rotate;
    c.rotate.seed = o->rotate_seed;
    if (calib->count()) c.calib.file = o->calib;
    c.calib.samples = o->calib_samples;
    c.calib.len = o->calib_len;  // 0: min(512, max_position_embeddings), set once the model is known
    c.calib.seed = o->calib_seed;
    c.validate();
    // Fail before loading anything when calibration is needed but no data was named.
    if (c.needs_calibration())
      SINKQ_CHECK(!c.calib.file.empty(), "{} needs calibration data: give --calib FILE",
                  c.w.on() && c.w.clip_grid ? "--w-clip grid"
                  : c.act_static()          ? "--a-quant static"
                                            : "--kv-quant static");
    return c;
  };
  cmd->callback([o, make_config, calib, calib_samples, calib_len, calib_seed] {
    apply_threads(*o);
    const PplProtocol protocol = parse_ppl_protocol(o->protocol);
    // The library runs the prefix protocol (eval/ppl.h, KvPrefix); the CLI does not build a prefix
    // yet (--prefix and calibration behind a prefix are the next step): say so instead of failing later.
    SINKQ_CHECK(protocol != PplProtocol::Prefix,
                "--protocol prefix needs a KV prefix, and 'sinkq ppl' cannot build one yet (no --prefix flag); "
                "use gptq or bos");
    SINKQ_CHECK(o->max_windows >= 0, "--max-windows must be >= 0 (got {})", o->max_windows);
    quant::SimConfig qcfg = make_config();  // before loading anything: bad flags fail fast
    const auto model = Model::load(o->model);
    const auto tok = Tokenizer::load(o->model);
    const int64_t max_pos = model->config().max_position_embeddings;
    const int64_t ctx = o->ctx > 0 ? o->ctx : std::min<int64_t>(2048, max_pos);
    SINKQ_CHECK(ctx >= 2, "--ctx must be at least 2 (got {})", ctx);
    SINKQ_CHECK(ctx <= max_pos, "--ctx {} is longer than the model's max_position_embeddings ({})", ctx, max_pos);
    const std::string text = read_text_file(o->file);
    SINKQ_CHECK(!text.empty(), "'{}' is empty: no text to score", o->file);
    std::fprintf(stderr, "ppl: tokenizing %s (%zu bytes)\n", o->file.c_str(), text.size());
    EncodeOptions raw;
    raw.add_special = false;
    raw.parse_special = false;
    const std::vector<int32_t> toks = tok->encode(text, raw);

    PplOptions po;
    po.ctx = ctx;
    po.protocol = protocol;
    po.max_windows = o->max_windows;
    po.bos_id = tok->bos_id();
    po.add_bos = tok->add_bos();
    po.progress = [](int64_t done, int64_t total, double ppl) {
      progress("ppl: window", done, total, fmt::format("ppl {:.4f}", ppl));
    };
    // Calibration samples, only when the configuration uses them.
    CalibSet cset;
    if (qcfg.needs_calibration()) {
      if (qcfg.calib.len == 0) qcfg.calib.len = std::min<int64_t>(512, max_pos);
      SINKQ_CHECK(qcfg.calib.len <= max_pos, "--calib-len {} is longer than the model's max_position_embeddings ({})",
                  qcfg.calib.len, max_pos);
      CalibOptions co;
      co.samples = qcfg.calib.samples;
      co.len = qcfg.calib.len;
      co.seed = qcfg.calib.seed;
      cset = load_calib(qcfg.calib.file, *tok, co);
      std::fprintf(stderr, "ppl: calibration %s: %zu samples x %lld tokens (seed %llu)\n", qcfg.calib.file.c_str(),
                   cset.samples.size(), (long long)co.len, (unsigned long long)co.seed);
    } else if (calib->count() || calib_samples->count() || calib_len->count() || calib_seed->count()) {
      // Nothing to calibrate: the flags are ignored, and the printed configuration says so (null).
      std::fprintf(stderr, "ppl: note: no part of this configuration is calibrated; --calib* flags are unused\n");
    }
    if (qcfg.any() || qcfg.rotate.on) std::fprintf(stderr, "ppl: quantization %s\n", qcfg.describe().c_str());
    const quant::SimModel sim = quant::build_sim(model, qcfg, cset.samples, [](std::string_view stage, int64_t done, int64_t total) {
      progress(fmt::format("ppl: {}", stage), done, total);
    });
    nlohmann::json calib_json = nullptr;
    if (qcfg.needs_calibration())
      calib_json = {{"file", cset.file}, {"format", cset.format}, {"documents", cset.documents},
                    {"eligible_documents", cset.eligible}, {"samples", cset.samples.size()},
                    {"len", cset.options.len}, {"seed", cset.options.seed}, {"bos", cset.bos}};
    Forward fwd(sim.model, ctx);
    sim.attach(fwd);
    std::unique_ptr<Forward> ref;
    if (o->kld) ref = std::make_unique<Forward>(model, ctx);
    const PplResult r = perplexity(fwd, toks, po, ref.get());
    if (o->json) {
      nlohmann::json cj = sim.to_json();
      if (!calib_json.is_null()) cj["calibration"]["data"] = calib_json;
      nlohmann::json j{{"ppl", r.ppl}, {"mean_nll", r.mean_nll}, {"tokens_scored", r.tokens_scored},
                       {"windows", r.windows}, {"ctx", ctx}, {"protocol", ppl_protocol_name(protocol)},
                       {"file", o->file}, {"file_tokens", toks.size()}, {"window_nll", r.window_nll},
                       {"config", cj}};
      if (r.has_kld) {
        j["kld"] = r.kld;
        j["window_kld"] = r.window_kld;
      }
      print_json(j);
      return;
    }
    fmt::print("config {}\n", qcfg.describe());
    if (qcfg.needs_calibration())
      fmt::print("calibration {} ({}, {} documents): {} samples x {} tokens, seed {}, bos {}; {:.1f} s; chosen: {}\n",
                 cset.file, cset.format, cset.documents, cset.samples.size(), cset.options.len, cset.options.seed,
                 cset.bos ? "yes" : "no", sim.calibration_report.at("seconds").get<double>(),
                 sim.calibration_report.at("summary").get<std::string>());
    fmt::print("protocol {}  ctx {}  windows {}  tokens scored {}\n", ppl_protocol_name(protocol), ctx,
               r.windows, r.tokens_scored);
    fmt::print("mean NLL {:.6f}  ppl {:.6f}\n", r.mean_nll, r.ppl);
    if (r.has_kld) fmt::print("KLD {:.6g} nats/token (vs full precision)\n", r.kld);
  });
}

}  // namespace sinkq::cli
