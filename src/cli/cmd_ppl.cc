// sinkq ppl -m DIR -f FILE [--ctx N] [--protocol gptq|bos|prefix|llamacpp] [--max-windows K] [--json] [--kld]
//           + the quantization / rotation / calibration / prefix flags of cli/quant_flags.h
//           (--preset, --w-*, --a-*, --kv-*, --rotate*, --calib*, --prefix, --prefix-source, --prefix-eta)
// The quantization flags build a quant::Recipe (preset first, then each given flag overrides
// its field); quant::build_sim then rotates, searches clip ratios / static scales on the
// calibration samples (when the config needs them), and fake-quantizes the weights once;
// activations / KV are quantized through site hooks. With a prefix (--prefix, or a prefixquant-*
// preset) the protocol defaults to `prefix` (eval/ppl.h): the prefix sits in front of every
// window, unscored; gptq / bos with a prefix, or prefix without one, are errors.
// -m may also be a sinkq artifact (sinkq quantize): it runs on the packed runtime (real int8/int4
// kernels, its stored prefix); quantization flags are then an error; --kld loads the recipe's
// source model as the full-precision reference.
#include <fmt/format.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>

#include "cli/commands.h"
#include "io/gguf.h"
#include "cli/quant_flags.h"
#include "core/mmap.h"
#include "calib/calib_data.h"
#include "eval/ppl.h"
#include "calib/prefix.h"
#include "quant/sim.h"
#include "sinkq/engine.h"
#include "tokenizer/tokenizer.h"

namespace sinkq::cli {

void register_ppl(CLI::App& app) {
  struct Opts : CommonFlags {
    std::string file;
    int64_t ctx = 0;
    std::string protocol;  // "" = gptq, or prefix when there is a prefix
    int64_t max_windows = 0;
    bool kld = false;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* cmd = app.add_subcommand("ppl", "Perplexity of a text file over non-overlapping windows");
  add_model_flag(*cmd, *o);
  cmd->add_option("-f,--file", o->file, "Text file (UTF-8; CRLF is read as LF); with --max-windows a large one is read only as far as they need")->required();
  cmd->add_option("-c,--ctx,--ctx-size", o->ctx,
                  "Window length in tokens (default: min(2048, max_position_embeddings - prefix length))")
      ->check(decimal_in(2, INT32_MAX));
  cmd->add_option("--protocol", o->protocol,
                  "gptq: [BOS]+text cut into windows (the papers' protocol; default without a prefix); bos: every "
                  "window is BOS + ctx-1 text tokens; prefix: the KV prefix before every window (default with --prefix); "
                  "llamacpp: llama-perplexity's chunks (BOS + ctx-1 tokens every ctx, the second half scored)");
  cmd->add_option("--max-windows", o->max_windows, "Score at most K windows (0 = all)")
      ->capture_default_str()
      ->check(decimal_in(0, INT32_MAX));
  const std::shared_ptr<QuantFlags> qf = add_quant_flags(*cmd);
  cmd->add_flag("--kld", o->kld,
                "Also KL(p_fp || p_quant) of the next-token distributions (runs the fp model too, behind the fp prefix)");
  add_output_flags(*cmd, *o);
  cmd->callback([o, qf] {
    apply_threads(*o);
    if (qf->dump_if_asked()) return;
    SINKQ_CHECK(o->max_windows >= 0, "--max-windows must be >= 0 (got {})", o->max_windows);
    if (!o->protocol.empty()) parse_ppl_protocol(o->protocol);  // unknown value: error naming --protocol
    // -m is a model directory / GGUF file (simulated quantization from the flags) or a sinkq
    // artifact (the packed runtime, its own prefix; quantization flags do not apply): the Engine
    // (include/sinkq/engine.h) runs either.
    OpenOptions oo;
    if (!qf->model_is_artifact(o->model, "ppl")) oo.recipe = qf->config();  // bad flags fail fast
    oo.pipeline = pipeline_options(*qf, "ppl");
    // Checks that do not need the (possibly slow) calibration first.
    const Engine::Preview pv = Engine::preview(o->model, oo);
    const PplProtocol protocol = o->protocol.empty() ? (pv.has_prefix ? PplProtocol::Prefix : PplProtocol::Gptq)
                                                     : parse_ppl_protocol(o->protocol);
    SINKQ_CHECK(protocol != PplProtocol::Prefix || pv.has_prefix,
                "--protocol prefix needs a KV prefix: give --prefix bos|auto|ids:..|text:..|system:..{}",
                pv.artifact ? " when quantizing (this artifact has none)" : "");
    SINKQ_CHECK(protocol == PplProtocol::Prefix || !pv.has_prefix,
                "--protocol {} scores windows without a prefix, but {}{}: use --protocol prefix (the default with a "
                "prefix){}",
                ppl_protocol_name(protocol), pv.artifact ? "the artifact has a KV prefix" : pv.prefix_name + " was given",
                pv.artifact || !oo.recipe || oo.recipe->preset.empty() ? "" : " (or set by --preset " + oo.recipe->preset + ")",
                pv.artifact ? "" : ", or --prefix none");
    const int64_t max_pos = pv.max_position;
    auto check_ctx = [&](int64_t ctx, int64_t P) {
      SINKQ_CHECK(ctx >= 2, "--ctx must be at least 2 (got {})", ctx);
      if (P == 0)
        SINKQ_CHECK(ctx <= max_pos, "--ctx {} is longer than the model's max_position_embeddings ({})", ctx, max_pos);
      else
        SINKQ_CHECK(ctx + P <= max_pos,
                    "--ctx {} plus the {}-token prefix ({}) is {}, more than the model's "
                    "max_position_embeddings ({}): use --ctx {} or less",
                    ctx, P, pv.prefix_name, ctx + P, max_pos, max_pos - P);
    };
    if (o->ctx > 0) check_ctx(o->ctx, pv.prefix_min);
    // Read before anything slow (calibration): a bad file fails at once.
    std::fprintf(stderr, "ppl: tokenizing %s\n", o->file.c_str());
    // With --max-windows, a large file is read only as far as those windows need (eval/ppl.h);
    // the default --ctx is at most 2048.
    const int64_t need = o->max_windows * (o->ctx > 0 ? o->ctx : std::min<int64_t>(2048, max_pos));
    const std::vector<int32_t> toks = scoring_tokens(o->file, *pv.tokenizer, need);
    // A text too short for one window fails before calibration and the KV cache (a large --ctx
    // would allocate and fill gigabytes first).
    if (o->ctx > 0) check_ppl_text(toks, ppl_options(*pv.tokenizer, o->ctx, protocol, o->max_windows));

    oo.tokenizer = pv.tokenizer;  // loaded once
    const std::shared_ptr<const Engine> engine = Engine::open(o->model, oo);
    const Tokenizer& tok = engine->tokenizer();
    const int64_t P = engine->prefix_size();
    const int64_t ctx = o->ctx > 0 ? o->ctx : std::min<int64_t>(2048, max_pos - P);
    check_ctx(ctx, P);

    PplOptions po = ppl_options(tok, ctx, protocol, o->max_windows);
    check_ppl_text(toks, po);  // before the KV cache of ctx positions is allocated
    po.progress = [](int64_t done, int64_t total, double ppl) {
      progress("ppl: window", done, total, fmt::format("ppl {:.4f}", ppl));
    };
    const std::unique_ptr<Session> session = engine->new_session(ctx);
    // --kld: the full-precision model behind the same prefix tokens (for an artifact: its source).
    std::unique_ptr<Session> ref = o->kld ? engine->reference()->new_session(ctx) : nullptr;
    const PplResult r = session->perplexity(toks, po, ref.get());
    const bool packed = engine->runtime() == Engine::Runtime::Packed;
    if (o->json) {
      nlohmann::json j{{"ppl", r.ppl}, {"mean_nll", r.mean_nll}, {"tokens_scored", r.tokens_scored},
                       {"windows", r.windows}, {"ctx", ctx}, {"protocol", ppl_protocol_name(protocol)},
                       {"file", o->file}, {"file_tokens", toks.size()}, {"window_nll", r.window_nll},
                       {"runtime", engine->runtime_name()}, {"prefix", engine->prefix_json()},
                       {"config", engine->config_json()}};
      if (r.has_kld) {
        j["kld"] = r.kld;
        j["window_kld"] = r.window_kld;
      }
      print_json(j);
      return;
    }
    if (packed) {
      fmt::print("{} (packed runtime)\n", engine->describe());
      if (P)
        fmt::print("prefix {} tokens: {} (stored in the artifact, full precision)\n", P,
                   tokens_text(engine->prefix_tokens(), tok));
    } else {
      const quant::Pipeline& qp = *engine->pipeline();
      const quant::SimModel& sim = qp.sim;
      const quant::Recipe& qcfg = sim.cfg;
      fmt::print("config {}\n", qcfg.describe());
      if (qcfg.needs_calibration())
        fmt::print("calibration {} ({}, {} documents): {} samples x {} tokens, seed {}, bos {}; {:.1f} s; chosen: {}\n",
                   qp.calib.file, qp.calib.format, qp.calib.documents, qp.calib.samples.size(), qcfg.calib.len,
                   qp.calib.options.seed, qp.calib.bos ? "yes" : "no",
                   sim.calibration_report.at("seconds").get<double>(),
                   sim.calibration_report.at("summary").get<std::string>());
      if (sim.prefix) {
        std::string how = qp.prefix_json.value("how", "");
        if (qp.prefix_json.contains("found")) how += fmt::format(", o = {}", qp.prefix_json["found"]["o"].get<int>());
        fmt::print("prefix {} ({} tokens: {}; {}), KV from the {} model\n", qcfg.prefix.spec, P,
                   tokens_text(qcfg.prefix.tokens, tok), how,
                   qcfg.prefix.source == quant::PrefixSim::Source::Fp ? "full-precision" : "quantized");
      }
    }
    fmt::print("protocol {}{}  ctx {}  windows {}  tokens scored {}\n", ppl_protocol_name(protocol),
               o->protocol.empty() && pv.has_prefix ? " (default with a prefix)" : "", ctx, r.windows, r.tokens_scored);
    fmt::print("mean NLL {:.6f}  ppl {:.6f}\n", r.mean_nll, r.ppl);
    if (r.has_kld) fmt::print("KLD {:.6g} nats/token (vs full precision)\n", r.kld);
  });
}

}  // namespace sinkq::cli
