// sinkq ppl -m DIR -f FILE [--ctx N] [--protocol gptq|bos] [--max-windows K] [--json]
//           [--preset P] [--w-bits N] [--w-group G] [--w-asym] [--w-clip R]
//           [--a-bits N] [--a-quant dynamic|static|cross] [--a-alpha A] [--a-cross-cols per_call|running_max]
//           [--kv-bits N] [--kv-gran token|head] [--kld]
// The quantization flags build a quant::SimConfig (preset first, then each given flag overrides
// its field); weights are fake-quantized once, activations / KV through site hooks.
#include <fmt/format.h>

#include <cmath>
#include <cstdio>
#include <memory>

#include "cli/commands.h"
#include "core/mmap.h"
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
    bool w_asym = false, kld = false;
    float w_clip = 1.0f, a_alpha = 0.15f;
    std::string a_quant = "dynamic", a_cross_cols = "per_call", kv_gran = "head";
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
  auto* w_clip = cmd->add_option("--w-clip", o->w_clip, "Weight clip ratio in (0, 1] (default 1)");
  auto* a_bits = cmd->add_option("--a-bits", o->a_bits, "Bits of the linear layers' inputs: 2..8, 16 = full precision");
  auto* a_quant = cmd->add_option("--a-quant", o->a_quant,
                                  "dynamic (per-token) | cross (CrossQuant) | static (needs calibration: not implemented yet)");
  auto* a_alpha = cmd->add_option("--a-alpha", o->a_alpha, "CrossQuant alpha in [0, 1] (default 0.15)");
  auto* a_cross_cols = cmd->add_option("--a-cross-cols", o->a_cross_cols,
                                       "CrossQuant column maxima: per_call (default, the paper's) | running_max (causal)");
  auto* kv_bits = cmd->add_option("--kv-bits", o->kv_bits, "KV cache bits: 2..8, 16 = full precision");
  auto* kv_gran = cmd->add_option("--kv-gran", o->kv_gran, "KV scale granularity: token | head (default head)");
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
    if (w_clip->count()) c.w.clip = o->w_clip;
    if (a_bits->count()) c.a.bits = quant::parse_bits("--a-bits", o->a_bits);
    if (a_quant->count()) c.a.mode = quant::parse_act_mode(o->a_quant);
    if (a_alpha->count()) c.a.alpha = o->a_alpha;
    if (a_cross_cols->count()) {
      SINKQ_CHECK(o->a_cross_cols == "per_call" || o->a_cross_cols == "running_max",
                  "unknown --a-cross-cols '{}': expected per_call or running_max", o->a_cross_cols);
      c.a.cross_columns = quant::parse_column_mode(o->a_cross_cols);
    }
    if (kv_bits->count()) c.kv.bits = quant::parse_bits("--kv-bits", o->kv_bits);
    if (kv_gran->count()) c.kv.granularity = quant::parse_kv_granularity(o->kv_gran);
    c.validate();
    return c;
  };
  cmd->callback([o, make_config] {
    apply_threads(*o);
    const PplProtocol protocol = parse_ppl_protocol(o->protocol);
    SINKQ_CHECK(o->max_windows >= 0, "--max-windows must be >= 0 (got {})", o->max_windows);
    const quant::SimConfig qcfg = make_config();  // before loading anything: bad flags fail fast
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
    if (qcfg.any()) std::fprintf(stderr, "ppl: quantization %s\n", qcfg.describe().c_str());
    Forward fwd(quant::fake_quantize_weights(model, qcfg), ctx);
    quant::attach(fwd, qcfg);
    std::unique_ptr<Forward> ref;
    if (o->kld) ref = std::make_unique<Forward>(model, ctx);
    const PplResult r = perplexity(fwd, toks, po, ref.get());
    if (o->json) {
      nlohmann::json j{{"ppl", r.ppl}, {"mean_nll", r.mean_nll}, {"tokens_scored", r.tokens_scored},
                       {"windows", r.windows}, {"ctx", ctx}, {"protocol", ppl_protocol_name(protocol)},
                       {"file", o->file}, {"file_tokens", toks.size()}, {"window_nll", r.window_nll},
                       {"config", qcfg.to_json()}};
      if (r.has_kld) {
        j["kld"] = r.kld;
        j["window_kld"] = r.window_kld;
      }
      print_json(j);
      return;
    }
    fmt::print("config {}\n", qcfg.describe());
    fmt::print("protocol {}  ctx {}  windows {}  tokens scored {}\n", ppl_protocol_name(protocol), ctx,
               r.windows, r.tokens_scored);
    fmt::print("mean NLL {:.6f}  ppl {:.6f}\n", r.mean_nll, r.ppl);
    if (r.has_kld) fmt::print("KLD {:.6g} nats/token (vs full precision)\n", r.kld);
  });
}

}  // namespace sinkq::cli
