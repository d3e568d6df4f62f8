#include "cli/quant_flags.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>

#include "cli/commands.h"
#include "core/error.h"
#include "core/mmap.h"
#include "calib/prefix.h"
#include "runtime/artifact.h"

namespace sinkq::cli {

namespace {
bool was_given(const CLI::Option* o) { return o != nullptr && o->count() > 0; }
}  // namespace

std::shared_ptr<QuantFlags> add_quant_flags(CLI::App& cmd) {
  auto o = std::make_shared<QuantFlags>();
  QuantFlags::Given& g = o->given;
  std::string presets;
  for (const auto& n : quant::Recipe::preset_names()) presets += (presets.empty() ? "" : "|") + n;
  g.preset = cmd.add_option("--preset", o->preset,
                            "Quantization preset (" + presets + ", or a short name such as w4a8kv4-g128-static); "
                            "flags below override it")
                 ->capture_default_str();
  g.recipe = cmd.add_option("--recipe", o->recipe,
                            "A recipe JSON file (as --dump-recipe prints it; per-layer / per-role weight rules "
                            "included, docs/quant.md): the starting point instead of --preset; flags below override it");
  g.dump_recipe = cmd.add_flag("--dump-recipe", o->dump_recipe,
                               "Print the recipe these flags give (JSON, to keep and edit for --recipe) and exit");
  g.w_bits = cmd.add_option("--w-bits", o->w_bits, "Weight bits: 2..8, 16 = full precision");
  g.w_group = cmd.add_option("--w-group", o->w_group, "Weight group size along the input (0 = per output channel)");
  g.w_asym = cmd.add_flag("--w-asym", o->w_asym, "Asymmetric weight quantization (default symmetric)");
  g.w_clip = cmd.add_option("--w-clip", o->w_clip,
                            "Weight clip ratio in (0, 1] (default 1), or 'grid': per output channel / group, "
                            "searched on the layer output (needs --calib)");
  g.a_bits = cmd.add_option("--a-bits", o->a_bits, "Bits of the linear layers' inputs: 2..8, 16 = full precision");
  g.a_quant = cmd.add_option("--a-quant", o->a_quant,
                             "dynamic (per-token) | cross (CrossQuant) | static (per-tensor, calibrated: needs --calib)");
  g.a_asym = cmd.add_flag("--a-asym", o->a_asym, "Asymmetric activation quantization (dynamic or static; default symmetric)");
  g.a_clip = cmd.add_option("--a-clip", o->a_clip,
                            "Static activations: clip ratio in (0, 1] or 'grid' (default: searched on the block output)");
  g.a_alpha = cmd.add_option("--a-alpha", o->a_alpha, "CrossQuant alpha in [0, 1] (default 0.15)");
  g.a_cross_cols = cmd.add_option("--a-cross-cols", o->a_cross_cols,
                                  "CrossQuant column maxima: per_call (default, the paper's) | running_max (causal) | static "
                                  "(calibrated, folded into the weights: runs on the packed kernels; needs --calib)");
  g.head_bits = cmd.add_option("--head-bits", o->head_bits,
                               "Embeddings and LM head: 8 = int8 (per-row weights), 4 = int4 (groups of --head-group "
                               "columns), 16 = full precision (default); the LM head's input is int8 per token");
  g.head_group = cmd.add_option("--head-group", o->head_group,
                                "--head-bits 4: input columns per scale of the table: 32 (default), 64, 128, or 0 (per row)");
  g.kv_bits = cmd.add_option("--kv-bits", o->kv_bits, "KV cache bits: 2..8, 16 = full precision");
  g.kv_quant = cmd.add_option("--kv-quant", o->kv_quant, "KV scales: dynamic (default) | static (calibrated: needs --calib)");
  g.kv_gran = cmd.add_option("--kv-gran", o->kv_gran,
                             "KV scale granularity: token (dynamic only) | head (default) | tensor (static only)");
  g.kv_clip = cmd.add_option("--kv-clip", o->kv_clip,
                             "Static KV: clip ratio in (0, 1] or 'grid' (default: searched on the block output)");
  g.kv_codebook = cmd.add_option("--kv-codebook", o->kv_codebook,
                                 "int (the integer quantizer, default) | KVQuant's per-vector codebooks: uniform | nf "
                                 "(NormalFloat) | kmeans | fisher (nuqX: Fisher-weighted k-means; needs --calib)");
  g.kv_keys = cmd.add_option("--kv-keys", o->kv_keys,
                             "--kv-codebook: key vectors pre_rope_channel (default, KVQuant) | post_rope_channel | "
                             "pre_rope_token | post_rope_token (channel ranges are calibrated: needs --calib)");
  g.kv_values = cmd.add_option("--kv-values", o->kv_values,
                               "--kv-codebook: value vectors token (default, ranges online) | channel (calibrated)");
  g.kv_outliers = cmd.add_option("--kv-outliers", o->kv_outliers,
                                 "--kv-codebook: dense-and-sparse outlier fraction per vector kept in fp16 (0.01 = "
                                 "KVQuant's 1%; default 0)");
  g.kv_qnorm = cmd.add_flag("--kv-qnorm", o->kv_qnorm, "--kv-codebook: Q-Norm of the levels (KVQuant §3.5; needs --calib)");
  g.kv_recent = cmd.add_option("--kv-recent", o->kv_recent,
                               "--kv-codebook: the most recent W tokens in int8 (per token and KV head) instead of the "
                               "codebook; older tokens coded (default 0: off)");
  g.kv_recent_bits = cmd.add_option("--kv-recent-bits", o->kv_recent_bits, "--kv-recent: bits of the recent window (8)");
  g.rotate = cmd.add_flag("--rotate", o->rotate, "Hadamard rotation (QuaRot R1-R4, computationally invariant) before quantizing");
  g.rotate_seed = cmd.add_option("--rotate-seed", o->rotate_seed, "Seed of the random Hadamard signs (default 0)");
  g.calib = cmd.add_option("--calib", o->calib,
                           "Calibration text (jsonl with \"text\" per line, e.g. C4, or plain text) for --w-clip grid, "
                           "--a-quant static, --kv-quant static, --prefix auto");
  g.calib_samples = cmd.add_option("--calib-samples", o->calib_samples, "Calibration samples N (default 8)");
  g.calib_len = cmd.add_option("--calib-len", o->calib_len,
                               "Tokens per calibration sample incl. BOS (default min(512, max_position_embeddings))");
  g.calib_seed = cmd.add_option("--calib-seed", o->calib_seed, "Seed of the calibration sampling (default 0)");
  g.calib_stat = cmd.add_option("--calib-stat", o->calib_stat,
                                "Range statistic of static activation / KV scales: sample_mean (each calibration "
                                "sample's range, averaged; default) | max (over every calibration token)");
  g.calib_grid = cmd.add_option("--calib-grid", o->calib_grid,
                                "Clip ratios every grid search tries, comma-separated in (0, 1] (default 1, 0.975, ..., "
                                "0.5; PrefixQuant's code: 0.25,0.35,...,0.95 with --calib-refine 10)");
  g.calib_search_samples = cmd.add_option("--calib-search-samples", o->calib_search_samples,
                                          "Static activation / KV searches: score the candidates on the first N "
                                          "calibration samples (their ranges still from all; default 0 = all)");
  g.calib_refine = cmd.add_option("--calib-refine", o->calib_refine,
                                  "Every grid search: N more ratios evenly within +-0.05 of the best grid ratio (per "
                                  "site; per row or group for weights; default 0 = none)");
  g.prefix = cmd.add_option("--prefix", o->prefix,
                            "Full-precision KV prefix in front of every sequence: bos (IntactKV[B]) | auto (PrefixQuant "
                            "§5.1 on --calib) | ids:1,2 | text:TEXT | system:TEXT (IntactKV[P]) | none");
  g.prefix_source = cmd.add_option("--prefix-source", o->prefix_source,
                                   "Who computes the prefix KV: fp (default; IntactKV on) | quant (the quantized model "
                                   "itself; IntactKV off baseline)");
  g.prefix_train = cmd.add_option("--prefix-train", o->prefix_train,
                                  "IntactKV+Cal: train the prefix KV for N epochs on the calibration samples (AdamW; "
                                  "needs --calib)");
  g.prefix_train_lr = cmd.add_option("--prefix-train-lr", o->prefix_train_lr, "--prefix-train learning rate (default 2e-4)");
  g.prefix_train_batch = cmd.add_option("--prefix-train-batch", o->prefix_train_batch,
                                        "--prefix-train samples per optimiser step (default 16)");
  g.finetune = cmd.add_option("--finetune", o->finetune,
                              "blockwise: PrefixQuant's block-wise fine-tuning of the weights and every quantization "
                              "parameter after the grid search (needs --calib) | none");
  g.finetune_epochs = cmd.add_option("--finetune-epochs", o->finetune_epochs,
                                     "--finetune epochs per block (default 10; the paper: 10 at W4A8KV4, 20 at W4A4KV4)");
  g.finetune_lr = cmd.add_option("--finetune-lr", o->finetune_lr, "--finetune learning rate of the weights (default 5e-6)");
  g.finetune_scale_lr = cmd.add_option("--finetune-scale-lr", o->finetune_scale_lr,
                                       "--finetune learning rate of the step sizes and static scales (default 5e-5)");
  g.finetune_batch = cmd.add_option("--finetune-batch", o->finetune_batch,
                                    "--finetune samples per optimiser step (default 4)");
  g.finetune_target = cmd.add_option("--finetune-target", o->finetune_target,
                                     "--finetune target of each block: fp (the fp block on the fp trajectory, "
                                     "EfficientQAT; default) | quant (the fp block on the block's quantized input)");
  g.prefix_eta = cmd.add_option("--prefix-eta", o->prefix_eta,
                                "--prefix auto: outlier threshold eta, token-wise max / median at down_proj's input or the residual stream (default 64)");
  return o;
}

bool QuantFlags::calib_flags_given() const {
  return was_given(given.calib) || was_given(given.calib_samples) || was_given(given.calib_len) || was_given(given.calib_seed) ||
         was_given(given.calib_stat) || was_given(given.calib_grid) || was_given(given.calib_search_samples) ||
         was_given(given.calib_refine);
}

std::string QuantFlags::first_given() const {
  const CLI::Option* all[] = {given.preset, given.recipe, given.w_bits, given.w_group, given.w_asym, given.w_clip, given.a_bits,
                              given.a_quant, given.a_asym, given.a_clip, given.a_alpha, given.a_cross_cols,
                              given.head_bits, given.head_group, given.kv_bits, given.kv_quant, given.kv_gran, given.kv_clip, given.kv_codebook,
                              given.kv_keys, given.kv_values, given.kv_outliers, given.kv_qnorm, given.kv_recent,
                              given.kv_recent_bits, given.rotate,
                              given.rotate_seed, given.calib, given.calib_samples, given.calib_len, given.calib_seed,
                              given.calib_stat, given.calib_grid, given.calib_search_samples, given.calib_refine,
                              given.prefix, given.prefix_source, given.prefix_eta, given.prefix_train,
                              given.prefix_train_lr, given.prefix_train_batch, given.finetune, given.finetune_epochs,
                              given.finetune_lr, given.finetune_scale_lr, given.finetune_batch, given.finetune_target};
  for (const CLI::Option* o : all)
    if (was_given(o)) return o->get_name();
  return "";
}

bool QuantFlags::model_is_artifact(const std::string& dir, std::string_view command) const {
  if (!runtime::is_artifact(dir)) return false;
  const std::string g = first_given();
  SINKQ_CHECK(g.empty(),
              "-m {} is a sinkq artifact (already quantized), so {} does not apply: quantization flags go to "
              "'sinkq quantize', or to 'sinkq {}' on the source model",
              dir, g, command);
  return true;
}

quant::Recipe QuantFlags::config() const {
  quant::Recipe c = recipe_of_flags();
  // Fail before loading anything when calibration is needed but no data was named.
  if (c.needs_calibration())
    SINKQ_CHECK(!c.calib.file.empty(), "{} needs calibration data: give --calib FILE", c.calibration_needed_by());
  if (c.prefix.spec == "auto")
    SINKQ_CHECK(!c.calib.file.empty(), "--prefix auto finds the outlier tokens on calibration data: give --calib FILE");
  return c;
}

bool QuantFlags::dump_if_asked() const {
  if (!dump_recipe) return false;
  std::printf("%s\n", recipe_of_flags().to_json().dump(2).c_str());
  return true;
}

quant::Recipe QuantFlags::recipe_of_flags() const {
  const Given& g = given;
  quant::Recipe c;
  if (was_given(g.recipe)) {
    SINKQ_CHECK(!was_given(g.preset), "--recipe and --preset both name the starting point: give one");
    std::string text;
    try {
      text = read_file(recipe);
    } catch (const Error& e) {
      fail("--recipe: {}", e.what());
    }
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(text);
    } catch (const nlohmann::json::exception& e) {
      fail("--recipe {}: not valid JSON: {}", recipe, e.what());
    }
    c = quant::Recipe::from_json(j, recipe);
  } else {
    c = quant::Recipe::from_preset(preset);
  }
  if (was_given(g.w_bits)) c.w.bits = quant::parse_bits("--w-bits", w_bits);
  if (was_given(g.w_group)) {
    SINKQ_CHECK(w_group >= 0, "--w-group must be >= 0 (0 = per output channel), got {}", w_group);
    c.w.group = w_group;
  }
  if (was_given(g.w_asym)) c.w.symmetric = !w_asym;
  if (was_given(g.w_clip)) {
    const quant::ClipSetting cs = quant::parse_clip("--w-clip", w_clip);
    c.w.clip_grid = cs.grid;
    c.w.clip = cs.ratio;
  }
  if (was_given(g.a_bits)) c.a.bits = quant::parse_bits("--a-bits", a_bits);
  if (was_given(g.a_quant)) c.a.mode = quant::parse_act_mode(a_quant);
  if (was_given(g.a_asym)) c.a.symmetric = !a_asym;
  if (was_given(g.a_clip)) {
    SINKQ_CHECK(c.a.mode == quant::ActMode::Static, "--a-clip applies to --a-quant static only");
    const quant::ClipSetting cs = quant::parse_clip("--a-clip", a_clip);
    c.a.clip_grid = cs.grid;
    c.a.clip = cs.ratio;
  }
  if (was_given(g.a_alpha)) c.a.alpha = a_alpha;
  if (was_given(g.a_cross_cols)) {
    SINKQ_CHECK(a_cross_cols == "per_call" || a_cross_cols == "running_max" || a_cross_cols == "static",
                "unknown --a-cross-cols '{}': expected per_call, running_max or static", a_cross_cols);
    c.a.cross_columns = quant::parse_column_mode(a_cross_cols);
  }
  if (was_given(g.head_bits)) {  // validated with the recipe (8, 4 or 16)
    c.head.bits = head_bits;
    c.head.group = head_bits == 4 ? 32 : 0;
  }
  if (was_given(g.head_group)) {
    SINKQ_CHECK(c.head.bits == 4, "--head-group applies to --head-bits 4 only");
    c.head.group = head_group;
  }
  if (was_given(g.kv_bits)) c.kv.bits = quant::parse_bits("--kv-bits", kv_bits);
  if (was_given(g.kv_quant)) c.kv.mode = quant::parse_kv_mode(kv_quant);
  if (was_given(g.kv_gran)) c.kv.granularity = quant::parse_kv_granularity(kv_gran);
  if (was_given(g.kv_codebook)) c.kv.codebook = quant::parse_kv_codebook(kv_codebook);
  if (was_given(g.kv_keys)) c.kv.parse_keys(kv_keys);
  if (was_given(g.kv_values)) c.kv.value_axis = quant::parse_kv_values(kv_values);
  if (was_given(g.kv_outliers)) c.kv.outliers = kv_outliers;
  if (was_given(g.kv_qnorm)) c.kv.qnorm = kv_qnorm;
  if (was_given(g.kv_recent)) c.kv.recent = kv_recent;
  if (was_given(g.kv_recent_bits)) c.kv.recent_bits = kv_recent_bits;
  if (was_given(g.kv_clip)) {
    SINKQ_CHECK(c.kv.mode == quant::KvMode::Static, "--kv-clip applies to --kv-quant static only");
    const quant::ClipSetting cs = quant::parse_clip("--kv-clip", kv_clip);
    c.kv.clip_grid = cs.grid;
    c.kv.clip = cs.ratio;
  }
  if (was_given(g.rotate_seed)) SINKQ_CHECK(rotate || c.rotate.on, "--rotate-seed needs --rotate");
  if (was_given(g.rotate)) c.rotate.on = c.rotate.on || rotate;
  if (was_given(g.rotate_seed)) c.rotate.seed = rotate_seed;
  if (was_given(g.calib)) c.calib.file = calib;
  if (was_given(g.calib_samples) || !was_given(g.recipe)) c.calib.samples = calib_samples;
  // 0: min(512, max_position_embeddings), set once the model is known
  if (was_given(g.calib_len) || !was_given(g.recipe)) c.calib.len = calib_len;
  if (was_given(g.calib_seed) || !was_given(g.recipe)) c.calib.seed = calib_seed;
  if (was_given(g.calib_stat)) {
    SINKQ_CHECK(calib_stat == "max" || calib_stat == "sample_mean",
                "--calib-stat: expected sample_mean or max, got '{}'", calib_stat);
    c.calib.statistic = quant::parse_calib_statistic(calib_stat);
  }
  if (was_given(g.calib_grid)) c.calib.grid = parse_number_list("--calib-grid", calib_grid, 0.0, 1.0, /*lo_open=*/true);
  if (was_given(g.calib_search_samples)) c.calib.search_samples = calib_search_samples;
  if (was_given(g.calib_refine)) c.calib.refine_steps = calib_refine;
  if (was_given(g.prefix)) {
    if (prefix == "none") {
      c.prefix = quant::PrefixSim{};
    } else {
      parse_prefix_spec(prefix);  // fail fast on a malformed value (errors name --prefix)
      c.prefix.spec = prefix;
    }
  }
  if (was_given(g.prefix_source)) {
    SINKQ_CHECK(!c.prefix.spec.empty(), "--prefix-source needs a prefix (--prefix bos|auto|ids:..|text:..|system:..)");
    c.prefix.source = quant::parse_prefix_source(prefix_source);
  }
  if (was_given(g.prefix_train)) c.prefix.train_epochs = prefix_train;
  if (was_given(g.prefix_train_lr)) {
    SINKQ_CHECK(c.prefix.train_epochs > 0, "--prefix-train-lr needs --prefix-train N");
    c.prefix.train_lr = prefix_train_lr;
  }
  if (was_given(g.prefix_train_batch)) {
    SINKQ_CHECK(c.prefix.train_epochs > 0, "--prefix-train-batch needs --prefix-train N");
    c.prefix.train_batch = prefix_train_batch;
  }
  if (was_given(g.finetune)) {
    SINKQ_CHECK(finetune == "blockwise" || finetune == "none", "--finetune: expected blockwise or none, got '{}'",
                finetune);
    c.finetune.epochs = finetune == "none" ? 0 : c.finetune.on() ? c.finetune.epochs : finetune_epochs;
  }
  auto finetune_flag = [&](CLI::Option* o, const char* name) {
    if (was_given(o)) SINKQ_CHECK(c.finetune.on(), "{} needs --finetune blockwise", name);
    return was_given(o);
  };
  if (finetune_flag(g.finetune_epochs, "--finetune-epochs")) {
    SINKQ_CHECK(finetune_epochs >= 1, "--finetune-epochs must be >= 1 (got {})", finetune_epochs);
    c.finetune.epochs = finetune_epochs;
  }
  if (finetune_flag(g.finetune_lr, "--finetune-lr")) c.finetune.lr_weights = finetune_lr;
  if (finetune_flag(g.finetune_scale_lr, "--finetune-scale-lr")) c.finetune.lr_scales = finetune_scale_lr;
  if (finetune_flag(g.finetune_batch, "--finetune-batch")) c.finetune.batch = finetune_batch;
  if (finetune_flag(g.finetune_target, "--finetune-target")) {
    SINKQ_CHECK(finetune_target == "fp" || finetune_target == "quant", "--finetune-target: expected fp or quant, got '{}'",
                finetune_target);
    c.finetune.target = finetune_target == "fp" ? quant::FinetuneSim::Target::FpTrajectory
                                                : quant::FinetuneSim::Target::QuantInput;
  }
  if (was_given(g.prefix_eta)) {
    SINKQ_CHECK(c.prefix.spec == "auto", "--prefix-eta applies to --prefix auto only");
    SINKQ_CHECK(prefix_eta > 0, "--prefix-eta must be > 0 (got {})", prefix_eta);
    c.prefix.eta = prefix_eta;
  }
  c.validate();
  return c;
}

quant::PipelineOptions pipeline_options(const QuantFlags& f, std::string_view log) {
  quant::PipelineOptions opt;
  opt.calib_flags_given = f.calib_flags_given();
  opt.log = std::string(log);
  opt.progress = [](const std::string& what, int64_t done, int64_t total) { progress(what, done, total); };
  return opt;
}

}  // namespace sinkq::cli
