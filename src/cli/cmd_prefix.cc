// sinkq prefix find -m DIR --calib FILE [--calib-samples N] [--calib-len L] [--calib-seed S] [--eta E] [--json]
// PrefixQuant §5.1: count outlier tokens on calibration samples and print the prefix (calib/prefix.h).
#include <fmt/format.h>

#include <cstdio>

#include "cli/commands.h"
#include "calib/calib_data.h"
#include "calib/prefix.h"
#include "tokenizer/tokenizer.h"

namespace sinkq::cli {

void register_prefix(CLI::App& app) {
  struct Opts : CommonFlags, CalibFlags {
    double eta = 64.0;
    std::string outlier_sites = "down_in,out";
  };
  auto o = std::make_shared<Opts>();
  CLI::App* grp = app.add_subcommand("prefix", "The full-precision KV prefix (PrefixQuant / IntactKV)");
  grp->require_subcommand(1);
  CLI::App* cmd = grp->add_subcommand(
      "find", "PrefixQuant §5.1: find the outlier tokens to prefix (o and the tokens) on calibration text");
  add_model_flag(*cmd, *o);
  add_calib_flags(*cmd, *o);
  cmd->add_option("--eta", o->eta, "Outlier threshold: token-wise max / median at down_proj's input or the residual stream")
      ->capture_default_str();
  add_outlier_sites_flag(*cmd, o->outlier_sites);
  add_output_flags(*cmd, *o);
  cmd->callback([o] {
    apply_threads(*o);
    SINKQ_CHECK(o->eta > 0, "--eta must be > 0 (got {})", o->eta);
    const std::vector<Site> sites = parse_outlier_sites(o->outlier_sites);
    const auto model = Model::load(o->model);
    const auto tok = Tokenizer::load(o->model);
    const CalibOptions co = calib_options(*o, model->config().max_position_embeddings);
    const CalibSet calib = load_calib(o->calib, *tok, co);
    Forward fwd(model, co.len);
    const FoundPrefix f = find_prefix(fwd, calib.samples, o->eta, tok->bos_id(), tok.get(),
                                      [](int64_t done, int64_t total) { progress("prefix: sample", done, total); },
                                      sites);
    if (o->json) {
      nlohmann::json j = f.to_json(tok.get());
      j["calib"] = {{"file", calib.file}, {"format", calib.format}, {"samples", co.samples}, {"len", co.len},
                    {"seed", co.seed}, {"bos", calib.bos}};
      print_json(j);
      return;
    }
    std::string toks;
    for (int32_t id : f.tokens) toks += fmt::format("{}{} {:?}", toks.empty() ? "" : ", ", id, tok->token_text(id));
    fmt::print("outlier number o = {} (eta {}, {} samples × {} tokens)\n", f.o, o->eta, co.samples, co.len);
    fmt::print("prefix ({} tokens): {}\n", f.tokens.size(), toks);
    if (f.stats.tokens.empty()) fmt::print("no outlier token found: the prefix is [BOS] alone\n");
    else if (f.initial_only) fmt::print("every outlier sits at the initial token: the prefix is [BOS] alone\n");
    fmt::print("mean outlier count per sequence, by layer:");
    for (double m : f.stats.mean_count) fmt::print(" {:.2f}", m);
    fmt::print("\n");
    for (const OutlierTokenCount& c : f.stats.counts)
      fmt::print("  token {:>6} {:<16} hits {:>6}  non-initial {:>6}  positions {:>6}\n", c.token_id,
                 fmt::format("{:?}", c.text), c.occurrences, c.non_initial, c.positions);
  });
}

}  // namespace sinkq::cli
