// sinkq ppl -m DIR -f FILE [--ctx N] [--protocol gptq|bos] [--max-windows K] [--json]
#include <fmt/format.h>

#include <cmath>
#include <cstdio>

#include "cli/commands.h"
#include "eval/ppl.h"
#include "tokenizer/tokenizer.h"

namespace sinkq::cli {

void register_ppl(CLI::App& app) {
  struct Opts : CommonFlags {
    std::string file;
    int64_t ctx = 0;
    std::string protocol = "gptq";
    int64_t max_windows = 0;
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
  add_output_flags(*cmd, *o);
  cmd->callback([o] {
    apply_threads(*o);
    const PplProtocol protocol = parse_ppl_protocol(o->protocol);
    SINKQ_CHECK(o->max_windows >= 0, "--max-windows must be >= 0 (got {})", o->max_windows);
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
    Forward fwd(model, ctx);
    const PplResult r = perplexity(fwd, toks, po);
    if (o->json) {
      print_json({{"ppl", r.ppl}, {"mean_nll", r.mean_nll}, {"tokens_scored", r.tokens_scored},
                  {"windows", r.windows}, {"ctx", ctx}, {"protocol", ppl_protocol_name(protocol)},
                  {"file", o->file}, {"file_tokens", toks.size()}, {"window_nll", r.window_nll}});
      return;
    }
    fmt::print("protocol {}  ctx {}  windows {}  tokens scored {}\n", ppl_protocol_name(protocol), ctx,
               r.windows, r.tokens_scored);
    fmt::print("mean NLL {:.6f}  ppl {:.6f}\n", r.mean_nll, r.ppl);
  });
}

}  // namespace sinkq::cli
