// sinkq analyze -m DIR --data FILE [--samples N] [--len L] [--seed S] [--eta E] [--bits B]
//               [--alpha LIST] [--out DIR] [--json] [--threads N]
// Where a model's outliers are (eval/analyze.h): token-wise max statistics of every site,
// outlier tokens at down_in, attention mass on the first tokens, and the quantization kernel of
// per-token vs CrossQuant activation quantization, over seeded calibration samples.
#include <fmt/format.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>

#include "cli/commands.h"
#include "core/error.h"
#include "eval/analyze.h"
#include "calib/calib_data.h"
#include "calib/prefix.h"
#include "tokenizer/tokenizer.h"

namespace sinkq::cli {

void register_analyze(CLI::App& app) {
  struct Opts : CommonFlags {
    std::string data, out, prefix, alpha = "0.15,0.45,0.75,1.0";
    int64_t samples = 8, len = 0;
    uint64_t seed = 0;
    double eta = 64.0;
    int bits = 4;
    std::string outlier_sites = "down_in,out";
  };
  auto o = std::make_shared<Opts>();
  CLI::App* cmd = app.add_subcommand(
      "analyze", "Where a model's outliers are: token-wise max statistics, outlier tokens, attention to the first "
                 "tokens, quantization kernel (PrefixQuant / CrossQuant analyses)");
  // -m and --data are checked in the callback (exit 1 with a message, like every other bad input).
  add_model_flag(*cmd, *o, /*required=*/false)->description("Hugging Face model directory (required)");
  cmd->add_option("--data", o->data,
                  "Calibration text (required): jsonl with a \"text\" field per line (C4) or plain text (WikiText-2)");
  cmd->add_option("--samples", o->samples, "Number of samples")->capture_default_str();
  cmd->add_option("--len", o->len, "Tokens per sample incl. [BOS] (default: min(512, max_position_embeddings))");
  cmd->add_option("--seed", o->seed, "Sampling seed")->capture_default_str()->check(decimal_u64());
  cmd->add_option("--eta", o->eta, "Outlier-token threshold: token max / median of its sequence > eta at a site of "
                                    "--outlier-sites")
      ->capture_default_str();
  add_outlier_sites_flag(*cmd, o->outlier_sites);
  cmd->add_option("--bits", o->bits, "Bits of the quantization-kernel statistics (2..8)")->capture_default_str();
  cmd->add_option("--alpha", o->alpha, "CrossQuant alpha values, comma-separated, each in [0, 1]")
      ->capture_default_str();
  cmd->add_option("--prefix", o->prefix,
                  "Full-precision KV prefix in front of every sample: bos | auto (PrefixQuant §5.1 on the same "
                  "samples) | ids:1,2 | text:TEXT | system:TEXT; samples then carry no [BOS] of their own");
  cmd->add_option("--out", o->out,
                  "Also write report.json and SVG plots into this new (or empty) directory, atomically");
  add_output_flags(*cmd, *o);
  cmd->callback([o] {
    apply_threads(*o);
    // Every flag checked before anything is loaded.
    SINKQ_CHECK(!o->model.empty(), "-m/--model DIR is required");
    SINKQ_CHECK(!o->data.empty(), "--data FILE is required (calibration text: jsonl or plain text)");
    SINKQ_CHECK(o->samples >= 1, "--samples must be >= 1 (got {})", o->samples);
    SINKQ_CHECK(o->len == 0 || o->len >= 2, "--len must be >= 2 (got {})", o->len);
    SINKQ_CHECK(std::isfinite(o->eta) && o->eta > 0, "--eta must be a positive number (got {})", o->eta);
    SINKQ_CHECK(o->bits >= 2 && o->bits <= 8, "--bits must be in 2..8 (got {})", o->bits);
    AnalyzeOptions opt;
    opt.eta = o->eta;
    opt.outlier_sites = parse_outlier_sites(o->outlier_sites);
    opt.bits = o->bits;
    opt.alphas = parse_number_list("--alpha", o->alpha, 0.0, 1.0);
    if (!o->out.empty()) {
      try {
        check_output_dir(o->out);
      } catch (const Error& e) {
        fail("--out: {}", e.what());
      }
    }

    const auto model = Model::load(o->model);
    const auto tok = Tokenizer::load(o->model);
    const int64_t max_pos = model->config().max_position_embeddings;
    const int64_t len = o->len > 0 ? o->len : std::min<int64_t>(512, max_pos);
    SINKQ_CHECK(len <= max_pos, "--len {} is longer than the model's max_position_embeddings ({})", len, max_pos);
    CalibOptions co;
    co.samples = o->samples;
    co.len = len;
    co.seed = o->seed;
    co.bos = true;
    std::fprintf(stderr, "analyze: sampling %lld × %lld tokens from %s\n", (long long)co.samples, (long long)len,
                 o->data.c_str());
    CalibSet calib;
    try {
      calib = load_calib(o->data, *tok, co);
    } catch (const Error& e) {
      fail("--data: {}", e.what());
    }

    opt.tokenizer = tok.get();
    opt.progress = [](int64_t done, int64_t total) { progress("analyze: sample", done, total); };
    nlohmann::json prefix_json;
    if (!o->prefix.empty()) {
      const PrefixSpec spec = parse_prefix_spec(o->prefix);
      std::vector<int32_t> ptoks;
      if (spec.kind == PrefixSpec::Kind::Auto) {
        Forward finder(model, len);
        const FoundPrefix f =
            find_prefix(finder, calib.samples, o->eta, tok->bos_id(), tok.get(), opt.progress, opt.outlier_sites);
        ptoks = f.tokens;
        prefix_json = f.to_json(tok.get());
      } else {
        ptoks = prefix_tokens(spec, *tok, o->model);
      }
      SINKQ_CHECK(int64_t(ptoks.size()) + len <= max_pos,
                  "--prefix of {} tokens + --len {} exceeds the model's max_position_embeddings ({})", ptoks.size(),
                  len, max_pos);
      opt.prefix = KvPrefix::compute(model, ptoks);
      // The body carries no [BOS] of its own: the prefix holds the sequence start (calib/prefix.h).
      for (auto& s : calib.samples)
        if (!s.empty() && s[0] == tok->bos_id() && calib.bos) s.erase(s.begin());
      std::string texts;
      for (int32_t id : ptoks) texts += fmt::format("{}{:?}", texts.empty() ? "" : " ", tok->token_text(id));
      std::fprintf(stderr, "analyze: KV prefix of %zu tokens: %s\n", ptoks.size(), texts.c_str());
    }
    const AnalyzeReport r = analyze(model, calib.samples, opt);

    nlohmann::json j = to_json(r);
    j["model_dir"] = o->model;
    if (!prefix_json.is_null()) j["prefix_found"] = prefix_json;
    j["data"] = {{"file", calib.file},         {"format", calib.format}, {"documents", calib.documents},
                 {"eligible", calib.eligible}, {"seed", o->seed},        {"bos", calib.bos}};
    if (!o->out.empty()) {
      try {
        write_report_dir(r, j, o->out);
      } catch (const Error& e) {
        fail("--out: {}", e.what());
      }
      std::fprintf(stderr, "analyze: wrote %s (report.json and SVG plots)\n", o->out.c_str());
    }
    if (o->json) {
      print_json(j);
      return;
    }
    fmt::print("model {}  data {} ({}, seed {}, {})\n", o->model, calib.file, calib.format, o->seed,
               calib.bos ? "[BOS] first" : "no [BOS]");
    fmt::print("{}", to_text(r));
    std::fflush(stdout);
  });
}

}  // namespace sinkq::cli
