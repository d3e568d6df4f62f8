// sinkq calib fisher -m DIR|GGUF --calib FILE [--calib-samples N] [--calib-len L] [--calib-seed S]
//                    -o OUT.safetensors [--force] [--json]
// The diagonal Fisher information of every layer's Keys (before RoPE) and Values on calibration
// samples, with the activations beside it (train/fisher.h: the file KVQuant's Fisher-weighted
// nuqX k-means reads). One forward and backward per sample, streamed to OUT (atomic).
//
// sinkq calib ids -m DIR|GGUF --calib FILE [--calib-samples N] [--calib-len L] [--calib-seed S]
//                 -o OUT.jsonl [--force] [--json]
// The calibration samples sinkq draws with these flags, as a file of token ids ({"ids": [...]}
// per line, calib/calib_data.h "ids"): --calib OUT.jsonl gives exactly these samples back, and
// another implementation reads the same tokens (bench/peers/). Written atomically.
#include <fmt/format.h>

#include <chrono>
#include <climits>
#include <cstdio>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "calib/calib_data.h"
#include "cli/commands.h"
#include "core/mmap.h"
#include "tokenizer/tokenizer.h"
#include "train/fisher.h"

namespace sinkq::cli {

void register_calib(CLI::App& app) {
  struct Opts : CommonFlags, CalibFlags {
    std::string out;
    bool force = false;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* grp = app.add_subcommand("calib", "Calibration statistics that need gradients");
  grp->require_subcommand(1);
  CLI::App* cmd = grp->add_subcommand(
      "fisher", "KVQuant §3.3: diagonal Fisher information of each layer's pre-RoPE Keys and Values (safetensors)");
  add_model_flag(*cmd, *o);
  add_calib_flags(*cmd, *o);
  cmd->add_option("-o,--out", o->out, "Output safetensors file")->required();
  cmd->add_flag("--force", o->force, "Replace an existing output file");
  add_output_flags(*cmd, *o);
  cmd->callback([o] {
    const auto t0 = std::chrono::steady_clock::now();
    apply_threads(*o);
    calib_options(*o, INT64_MAX);  // bad sampling flags fail before the model loads
    std::error_code ec;
    SINKQ_CHECK(o->force || !std::filesystem::exists(o->out, ec),
                "'{}' already exists: refusing to overwrite it (use --force to replace it)", o->out);
    const auto model = Model::load(o->model);
    const auto tok = Tokenizer::load(o->model);
    const CalibOptions co = calib_options(*o, model->config().max_position_embeddings);
    const CalibSet calib = load_calib(o->calib, *tok, co);
    std::fprintf(stderr, "calib fisher: %zu samples x %lld tokens, one forward + backward each\n",
                 calib.samples.size(), (long long)co.len);
    const train::FisherResult r = train::write_fisher(
        *model, calib.samples, o->out,
        {{"model", o->model}, {"calib_file", calib.file}, {"calib_len", std::to_string(co.len)},
         {"calib_seed", std::to_string(co.seed)}, {"calib_bos", calib.bos ? "true" : "false"}},
        [](int64_t done, int64_t total) { progress("calib fisher: sample", done, total); });
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const int64_t peak = peak_rss_bytes();
    if (o->json) {
      print_json({{"out", o->out}, {"samples", r.samples}, {"tokens", r.tokens}, {"bytes", r.bytes},
                  {"mean_fisher_k", r.mean_k}, {"mean_fisher_v", r.mean_v}, {"sample_loss", r.loss},
                  {"seconds", seconds}, {"peak_rss_bytes", peak}});
      return;
    }
    fmt::print("wrote {} ({} samples, {} tokens, {} bytes) in {:.1f} s, peak RSS {:.0f} MiB\n", o->out, r.samples,
               r.tokens, r.bytes, seconds, double(peak) / (1 << 20));
    fmt::print("mean Fisher per layer, K (pre-RoPE) / V:\n");
    for (size_t l = 0; l < r.mean_k.size(); ++l) fmt::print("  layer {:>3}  {:.4g} / {:.4g}\n", l, r.mean_k[l], r.mean_v[l]);
  });

  auto oi = std::make_shared<Opts>();
  CLI::App* ids = grp->add_subcommand(
      "ids", "The calibration samples these flags draw, as token ids (jsonl, {\"ids\": [...]} per line; --calib reads it)");
  add_model_flag(*ids, *oi);
  add_calib_flags(*ids, *oi);
  ids->add_option("-o,--out", oi->out, "Output jsonl file")->required();
  ids->add_flag("--force", oi->force, "Replace an existing output file");
  add_output_flags(*ids, *oi);
  ids->callback([oi] {
    calib_options(*oi, INT64_MAX);
    std::error_code ec;
    SINKQ_CHECK(oi->force || !std::filesystem::exists(oi->out, ec),
                "'{}' already exists: refusing to overwrite it (use --force to replace it)", oi->out);
    const auto model = Model::load(oi->model);
    const auto tok = Tokenizer::load(oi->model);
    const CalibOptions co = calib_options(*oi, model->config().max_position_embeddings);
    const CalibSet calib = load_calib(oi->calib, *tok, co);
    std::string text;
    for (const auto& s : calib.samples) text += nlohmann::json{{"ids", s}}.dump() + "\n";
    write_file_atomic(oi->out, text);
    if (oi->json) {
      print_json({{"out", oi->out}, {"samples", calib.samples.size()}, {"len", co.len}, {"seed", co.seed},
                  {"bos", calib.bos}, {"calib_file", calib.file}, {"format", calib.format}});
      return;
    }
    fmt::print("wrote {} ({} samples x {} tokens{}, from {} seed {})\n", oi->out, calib.samples.size(), co.len,
               calib.bos ? ", [BOS] first" : "", calib.file, co.seed);
  });
}

}  // namespace sinkq::cli
