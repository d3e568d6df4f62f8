// sinkq/cli/quant_flags.h — the quantization, rotation, calibration and prefix flags, declared
// once and shared by every command that builds a simulated quantized model (ppl, generate,
// quantize, ladder): they make the quant::Recipe that Engine::open (include/sinkq/engine.h) runs.
//
//   --preset P | --recipe FILE.json   --dump-recipe
//   --w-bits N --w-group G --w-asym --w-clip R|grid
//   --a-bits N --a-quant dynamic|static|cross --a-asym --a-clip R|grid --a-alpha A
//   --a-cross-cols per_call|running_max
//   --head-bits 8|4 --head-group 0|32|64|128
//   --kv-bits N --kv-quant dynamic|static --kv-gran token|head|tensor --kv-clip R|grid
//   --kv-codebook int|uniform|nf|kmeans|fisher --kv-keys pre_rope_channel|.. --kv-values token|channel
//   --kv-outliers P --kv-qnorm --kv-recent W --kv-recent-bits 8   (KVQuant, quant/kvquant.h)
//   --rotate --rotate-seed S
//   --calib FILE --calib-samples N --calib-len L --calib-seed S
//   --prefix none|bos|auto|ids:..|text:..|system:..  --prefix-source fp|quant  --prefix-eta E
//   --prefix-train N [--prefix-train-lr LR] [--prefix-train-batch B]  (IntactKV+Cal)
//   --finetune blockwise|none [--finetune-epochs N] [--finetune-lr LR] [--finetune-scale-lr LR]
//     [--finetune-batch B] [--finetune-target fp|quant]  (PrefixQuant block-wise fine-tuning)
//
// QuantFlags::config(): the preset first, then every flag that was given overrides its field;
// every value is checked and errors name the flag. Flags not given keep the preset's value.
#pragma once

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <memory>
#include <string>
#include <string_view>

#include "calib/calib_data.h"
#include "model/model.h"
#include "quant/pipeline.h"
#include "quant/sim.h"
#include "tokenizer/tokenizer.h"

namespace sinkq::cli {

struct QuantFlags {
  std::string preset = "fp16";
  std::string recipe;       // --recipe FILE ("" = not given)
  bool dump_recipe = false;  // --dump-recipe
  int w_bits = 16, w_group = 0, a_bits = 16, kv_bits = 16, head_bits = 16, head_group = 32;
  bool w_asym = false, a_asym = false, rotate = false;
  float a_alpha = 0.15f;
  std::string w_clip = "1", a_clip = "grid", kv_clip = "grid";
  std::string a_quant = "dynamic", a_cross_cols = "per_call", kv_quant = "dynamic", kv_gran = "head";
  std::string kv_codebook = "int", kv_keys = "pre_rope_channel", kv_values = "token";
  double kv_outliers = 0.0;
  bool kv_qnorm = false;
  int kv_recent = 0, kv_recent_bits = 8;
  uint64_t rotate_seed = 0, calib_seed = 0;
  std::string calib;
  int64_t calib_samples = 8, calib_len = 0;
  std::string calib_stat = "sample_mean";  // --calib-stat
  std::string calib_grid;                  // --calib-grid LIST ("" = not given)
  int64_t calib_search_samples = 0;        // --calib-search-samples
  int calib_refine = 0;                    // --calib-refine
  std::string prefix;                 // --prefix as given ("" = not given; "none" = no prefix)
  std::string prefix_source = "fp";   // --prefix-source
  double prefix_eta = 64.0;           // --prefix-eta: η of --prefix auto (PrefixQuant §5.1)
  int prefix_train = 0;               // --prefix-train N: IntactKV+Cal epochs
  double prefix_train_lr = 2e-4;
  int prefix_train_batch = 16;
  std::string finetune;               // --finetune blockwise|none
  int finetune_epochs = 10;
  double finetune_lr = 5e-6, finetune_scale_lr = 5e-5;
  int finetune_batch = 4;
  std::string finetune_target = "fp";

  // Which flags were given (set by add_quant_flags; null = never declared = not given).
  struct Given {
    CLI::Option *preset = nullptr, *recipe = nullptr, *dump_recipe = nullptr;
    CLI::Option *w_bits = nullptr, *w_group = nullptr, *w_asym = nullptr, *w_clip = nullptr;
    CLI::Option *a_bits = nullptr, *a_quant = nullptr, *a_asym = nullptr, *a_clip = nullptr, *a_alpha = nullptr,
                *a_cross_cols = nullptr;
    CLI::Option *kv_bits = nullptr, *kv_quant = nullptr, *kv_gran = nullptr, *kv_clip = nullptr;
    CLI::Option *head_bits = nullptr, *head_group = nullptr;
    CLI::Option *kv_codebook = nullptr, *kv_keys = nullptr, *kv_values = nullptr, *kv_outliers = nullptr,
                *kv_qnorm = nullptr, *kv_recent = nullptr, *kv_recent_bits = nullptr;
    CLI::Option *rotate = nullptr, *rotate_seed = nullptr;
    CLI::Option *calib = nullptr, *calib_samples = nullptr, *calib_len = nullptr, *calib_seed = nullptr,
                *calib_stat = nullptr, *calib_grid = nullptr, *calib_search_samples = nullptr, *calib_refine = nullptr;
    CLI::Option *prefix = nullptr, *prefix_source = nullptr, *prefix_eta = nullptr;
    CLI::Option *prefix_train = nullptr, *prefix_train_lr = nullptr, *prefix_train_batch = nullptr;
    CLI::Option *finetune = nullptr, *finetune_epochs = nullptr, *finetune_lr = nullptr, *finetune_scale_lr = nullptr,
                *finetune_batch = nullptr, *finetune_target = nullptr;
  } given;

  // The configuration: preset, then given flags; validated (errors name the flag). The prefix is
  // recorded as spec only (cfg.prefix.spec; "" = none): tokens are resolved by run_quant_pipeline.
  // Fails before anything is loaded when calibration is needed but --calib was not given.
  quant::Recipe config() const;
  // --dump-recipe: prints the recipe of the flags (preset or --recipe, then the flags; JSON) to
  // stdout and returns true: the command then stops. False when it was not given.
  bool dump_if_asked() const;
  // The recipe of the flags without the "needs --calib" checks of config().
  quant::Recipe recipe_of_flags() const;
  // Whether any --calib* flag was given.
  bool calib_flags_given() const;
  // The name of the first flag above that was given ("--preset", "--w-bits", ...), "" for none:
  // a sinkq artifact is already quantized, so commands refuse these flags on one.
  std::string first_given() const;
  // Whether -m `dir` is a sinkq artifact (runtime/artifact.h); if so, no flag above may be given
  // (sinkq::Error naming the first one, and where it belongs: 'sinkq quantize' or `command` on
  // the source model).
  bool model_is_artifact(const std::string& dir, std::string_view command) const;
};

// Declares every flag above on cmd and returns the struct they write into.
std::shared_ptr<QuantFlags> add_quant_flags(CLI::App& cmd);

// The options of the library's pipeline (quant/pipeline.h, run by Engine::open) for these flags:
// a note when --calib* flags were given for a configuration that calibrates nothing; progress on
// stderr as every command prints it, lines starting with `log` (e.g. "ppl").
quant::PipelineOptions pipeline_options(const QuantFlags& f, std::string_view log);

}  // namespace sinkq::cli
