// sinkq calib fisher -m DIR|GGUF --calib FILE [--calib-samples N] [--calib-len L] [--calib-seed S]
//                    -o OUT.safetensors [--force] [--json]
// The diagonal Fisher information of every layer's Keys (before RoPE) and Values on calibration
// samples, with the activations beside it (train/fisher.h: the file KVQuant's Fisher-weighted
// nuqX k-means reads). One forward and backward per sample, streamed to OUT (atomic).
#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <filesystem>

#include "calib/calib_data.h"
#include "cli/commands.h"
#include "perf/bench.h"
#include "tokenizer/tokenizer.h"
#include "train/fisher.h"

namespace sinkq::cli {

void register_calib(CLI::App& app) {
  struct Opts : CommonFlags {
    std::string calib, out;
    int64_t samples = 8, len = 0;
    uint64_t seed = 0;
    bool force = false;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* grp = app.add_subcommand("calib", "Calibration statistics that need gradients");
  grp->require_subcommand(1);
  CLI::App* cmd = grp->add_subcommand(
      "fisher", "KVQuant §3.3: diagonal Fisher information of each layer's pre-RoPE Keys and Values (safetensors)");
  add_model_flag(*cmd, *o);
  cmd->add_option("--calib", o->calib, "Calibration text (.txt, or .jsonl with a \"text\" field per line)")->required();
  cmd->add_option("--calib-samples", o->samples, "Number of samples")->capture_default_str();
  cmd->add_option("--calib-len", o->len, "Tokens per sample, [BOS] included (default min(512, max positions))");
  cmd->add_option("--calib-seed", o->seed, "Sampling seed")->capture_default_str();
  cmd->add_option("-o,--out", o->out, "Output safetensors file")->required();
  cmd->add_flag("--force", o->force, "Replace an existing output file");
  add_output_flags(*cmd, *o);
  cmd->callback([o] {
    const auto t0 = std::chrono::steady_clock::now();
    apply_threads(*o);
    SINKQ_CHECK(o->samples >= 1, "--calib-samples must be >= 1 (got {})", o->samples);
    SINKQ_CHECK(o->len == 0 || o->len >= 2, "--calib-len must be >= 2 (got {})", o->len);
    std::error_code ec;
    SINKQ_CHECK(o->force || !std::filesystem::exists(o->out, ec),
                "'{}' already exists: refusing to overwrite it (use --force to replace it)", o->out);
    const auto model = Model::load(o->model);
    const auto tok = Tokenizer::load(o->model);
    CalibOptions co;
    co.samples = o->samples;
    co.len = o->len > 0 ? o->len : std::min<int64_t>(512, model->config().max_position_embeddings);
    co.seed = o->seed;
    SINKQ_CHECK(co.len <= model->config().max_position_embeddings,
                "--calib-len {} exceeds the model's max_position_embeddings ({})", co.len,
                model->config().max_position_embeddings);
    const CalibSet calib = load_calib(o->calib, *tok, co);
    std::fprintf(stderr, "calib fisher: %zu samples x %lld tokens, one forward + backward each\n",
                 calib.samples.size(), (long long)co.len);
    const train::FisherResult r = train::write_fisher(
        *model, calib.samples, o->out,
        {{"model", o->model}, {"calib_file", calib.file}, {"calib_len", std::to_string(co.len)},
         {"calib_seed", std::to_string(co.seed)}, {"calib_bos", calib.bos ? "true" : "false"}},
        [](int64_t done, int64_t total) { progress("calib fisher: sample", done, total); });
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const int64_t peak = perf::proc_status_bytes("VmHWM:");
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
}

}  // namespace sinkq::cli
