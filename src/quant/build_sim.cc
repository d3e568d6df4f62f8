// sinkq/quant/build_sim.cc — the calibrated pipeline build_sim (sim.h): prefix, rotation, the
// weight clip search, fake-quantized weights, the static searches (calibrate.cc), in that order;
// and calibrate_static_max, the plain abs-max static scales bench times configurations with.
#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <map>

#include "core/error.h"
#include "quant/calibrate.h"
#include "quant/finetune.h"
#include "quant/rotate.h"
#include "train/intactkv_cal.h"

namespace sinkq::quant {

using nlohmann::json;

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

}  // namespace

std::vector<StaticQuant> calibrate_static_max(Forward& fwd, const Recipe& cfg, std::span<const int32_t> tokens) {
  SINKQ_CHECK(cfg.act_static(), "calibrate_static_max: the recipe has no static activations");
  const ModelConfig& mc = fwd.model().config();
  const int L = mc.num_layers;
  Recipe plain = cfg;
  plain.a.clip_grid = false;
  plain.a.clip = 1.0f;
  std::vector<Calibrator> cal;
  for (int l = 0; l < L; ++l)
    for (Site s : kLinearInputSites) cal.emplace_back(static_spec(plain, s, mc));
  std::vector<int> handles;
  for (int s = 0; s < 4; ++s)
    handles.push_back(fwd.hooks().add(kLinearInputSites[s], -1, [&cal, s](SiteView& v) {
      cal[size_t(v.layer) * 4 + size_t(s)].observe(v.data, v.tokens, v.features);
    }));
  fwd.reset();
  fwd.step(tokens, /*all_logits=*/false);
  for (int h : handles) fwd.hooks().remove(h);
  fwd.reset();
  std::vector<StaticQuant> out;
  for (int l = 0; l < L; ++l)
    for (int s = 0; s < 4; ++s)
      out.push_back({kLinearInputSites[s], l, static_spec(plain, kLinearInputSites[s], mc), cal[size_t(l) * 4 + size_t(s)].params()});
  return out;
}

namespace {

// "min–max" of a list of ratios (or the one value).
std::string range_text(const json& ratios) {
  double lo = 2, hi = -1;
  for (const auto& r : ratios) lo = std::min(lo, r.get<double>()), hi = std::max(hi, r.get<double>());
  return lo == hi ? fmt::format("{}", lo) : fmt::format("{}-{}", lo, hi);
}

}  // namespace

SimModel build_sim(std::shared_ptr<const Model> base, const Recipe& cfg,
                   std::span<const std::vector<int32_t>> calib_in, const CalibProgress& progress) {
  SINKQ_ASSERT(base != nullptr);
  cfg.validate();
  const ModelConfig& mc = base->config();
  cfg.check_layers(mc.num_layers);
  const bool calibrate = cfg.needs_calibration();
  const PrefixSim& px = cfg.prefix;
  SINKQ_CHECK(px.spec.empty() || px.on(), "--prefix {}: the prefix tokens were not resolved before build_sim", px.spec);
  const int64_t P = int64_t(px.tokens.size());
  if (px.on()) {
    SINKQ_CHECK(P < mc.max_position_embeddings, "--prefix: {} tokens leave no room in max_position_embeddings ({})",
                P, mc.max_position_embeddings);
    for (int32_t t : px.tokens)
      SINKQ_CHECK(t >= 0 && t < mc.vocab_size, "--prefix: token id {} is outside the vocabulary ({})", t, mc.vocab_size);
  }
  // The calibration inputs behind the prefix (sim.h PrefixSim): a leading [BOS] dropped when the
  // prefix holds one; source Quant: the prefix tokens inline in front of every body.
  std::vector<std::vector<int32_t>> owned;
  std::span<const std::vector<int32_t>> calib = calib_in;
  if (calibrate) {
    SINKQ_CHECK(!calib.empty(), "{} needs calibration data: give --calib FILE", cfg.calibration_needed_by());
    for (size_t s = 0; s < calib.size(); ++s) SINKQ_CHECK(!calib[s].empty(), "calibration sample {} is empty (--calib)", s);
    if (px.on()) {
      for (const auto& s : calib_in) {
        const size_t drop = px.strips_bos() && s[0] == px.bos_id ? 1 : 0;
        std::vector<int32_t> body;
        if (px.source == PrefixSim::Source::Quant) body = px.tokens;
        body.insert(body.end(), s.begin() + long(drop), s.end());
        SINKQ_CHECK(body.size() > (px.source == PrefixSim::Source::Quant ? px.tokens.size() : 0),
                    "calibration sample of {} token(s) has no body left behind the prefix (--calib-len)", s.size());
        owned.push_back(std::move(body));
      }
      calib = owned;
    }
    for (size_t s = 0; s < calib.size(); ++s) {
      const int64_t n = int64_t(calib[s].size());
      if (px.on() && px.source == PrefixSim::Source::Fp)
        SINKQ_CHECK(P + n <= mc.max_position_embeddings,
                    "the {}-token prefix (--prefix {}) plus a calibration body of {} tokens exceeds "
                    "max_position_embeddings ({}): lower --calib-len to {} or less",
                    P, px.spec.empty() ? "ids" : px.spec, n, mc.max_position_embeddings,
                    mc.max_position_embeddings - P + (px.strips_bos() ? 1 : 0));
      else if (px.on())
        SINKQ_CHECK(n <= mc.max_position_embeddings,
                    "the {}-token prefix (--prefix {}) inline before a calibration body of {} tokens exceeds "
                    "max_position_embeddings ({}): lower --calib-len to {} or less",
                    P, px.spec.empty() ? "ids" : px.spec, n - P, mc.max_position_embeddings,
                    mc.max_position_embeddings - P + (px.strips_bos() ? 1 : 0));
      else
        SINKQ_CHECK(n <= mc.max_position_embeddings,
                    "calibration sample {} has {} tokens, more than max_position_embeddings ({}): lower --calib-len",
                    s, n, mc.max_position_embeddings);
    }
  }
  if (cfg.rotate.on) check_rotatable(mc);
  const auto t0 = Clock::now();
  SimModel sm;
  sm.cfg = cfg;
  json report = json::object();
  // 0. KVQuant's Fisher information (step 4b's weights), on the fp model before any step below
  // makes an fp32 copy of its own: its backward widens the model too, and the two never coexist.
  KvFisher kv_fisher;
  if (cfg.kv.vector() && cfg.kv.codebook == KvCodebook::Fisher) {
    const auto t = Clock::now();
    const bool fp_prefix_on = px.on() && px.source == PrefixSim::Source::Fp;
    kv_fisher = kvquant_fisher(base, cfg, fp_prefix_on ? std::span<const int32_t>(px.tokens) : std::span<const int32_t>(),
                               calib, progress);
    report["kv_fisher_seconds"] = round4(seconds_since(t));
  }
  // 1. Rotation: every later step (searches included) sees the rotated model.
  const std::shared_ptr<const Model> rotated = rotate_model(base, cfg.rotate);
  // The fp prefix: the rotated fp model with its online rotations (the body's basis).
  std::shared_ptr<const KvPrefix> fp_prefix;
  if (px.on() && px.source == PrefixSim::Source::Fp)
    fp_prefix = KvPrefix::compute(rotated, px.tokens, [&cfg](Forward& f) { attach_online_rotation(f, cfg.rotate); });
  // 1b. CrossQuant's static column maxima (they fold into the weights, so before steps 2 and 3).
  if (cfg.act_cross_static()) {
    const auto t = Clock::now();
    sm.cross = calibrate_cross_columns(rotated, cfg, calib, fp_prefix, progress, report);
    report["cross_columns"]["seconds"] = round4(seconds_since(t));
  }
  const CrossFolds* folds = sm.cross.empty() ? nullptr : &sm.cross;
  // 2. Weight clip grid search on the fp (rotated) model.
  if (cfg.weight_clip_grid()) {
    const auto t = Clock::now();
    sm.weight_clip = search_weight_clips(rotated, cfg, calib, fp_prefix, progress, report, folds);
    report["weights"]["seconds"] = round4(seconds_since(t));
  }
  // 3. Weights fake-quantized (fixed ratio or the chosen ones), folded first with CrossQuant's columns.
  // 4. Static activation / KV scales on the quantized-weight model.
  // When the static search runs on build_sim's own rotated copy and nothing reads that copy at full
  // precision afterwards (no fine-tuning, no prefix training), each layer is fake-quantized in place
  // once the search has its fp targets: one fp32 copy of the model is held instead of two (the 1.5B:
  // 7.1 GB instead of 12.3), the same values bit for bit (test SimModel.InPlaceEqualsCopy).
  const ModelClipRatios* clips = sm.weight_clip.empty() ? nullptr : &sm.weight_clip;
  const bool statics = cfg.act_static() || cfg.kv_static();
  const bool in_place = statics && rotated != base && rotated.use_count() == 1 && !cfg.finetune.on() &&
                        px.train_epochs == 0 && can_fake_quantize_in_place(*rotated, cfg, folds);
  sm.model = in_place ? rotated : fake_quantize_weights(rotated, cfg, clips, folds);
  if (statics) {
    const auto t = Clock::now();
    std::function<void(int)> prepare;
    if (in_place) prepare = [&](int l) { fake_quantize_layer_in_place(*rotated, cfg, l, clips, folds); };
    sm.statics = search_statics(rotated, sm.model, cfg, calib, fp_prefix, progress, report, folds, prepare);
    report["static_seconds"] = round4(seconds_since(t));
  }
  // 4b. KVQuant's codebook quantizers, calibrated on the model as it now runs (KV unquantized).
  if (cfg.kv.vector()) {
    const auto t = Clock::now();
    sm.kvq = calibrate_kvquant(sm, fp_prefix, calib, std::move(kv_fisher), progress, report);
    report["kv_codebook_seconds"] = round4(seconds_since(t));
  }
  // 5. Block-wise fine-tuning (PrefixQuant §5.2) from the grid-searched parameters.
  if (cfg.finetune.on()) {
    FinetuneResult f = finetune_blockwise(rotated, cfg, &sm.weight_clip, sm.statics, fp_prefix, calib, progress);
    sm.model = std::move(f.model);
    sm.statics = std::move(f.statics);
    report["finetune"] = std::move(f.report);
    if (cfg.head.on()) {  // the fine-tuned model carries the fp tables: the int8 head on top of it
      Recipe head_only;
      head_only.head = cfg.head;
      sm.model = fake_quantize_weights(sm.model, head_only);
    }
  }
  // 6. The prefix every Forward of the result runs behind.
  if (fp_prefix) {
    sm.prefix = fp_prefix;
  } else if (px.on()) {
    // IntactKV off: the quantized model's own rows for the prefix tokens (all its hooks on).
    sm.prefix = KvPrefix::compute(sm.model, px.tokens, [&sm](Forward& f) { sm.attach_hooks(f); });
  }
  // 7. IntactKV+Cal: the prefix trained so the quantized model's layer outputs match the fp ones.
  if (px.train_epochs > 0) {
    SiteHooks hooks(mc.num_layers);  // the quantized model's dynamic quantizers, as Forward runs them
    const std::vector<train::LayerSites<float>> qsites = training_sites(cfg, mc, sm.statics, hooks);
    const std::vector<train::LayerSites<float>> fsites = fp_training_sites(cfg, mc);
    const auto t = Clock::now();
    std::vector<std::vector<int32_t>> bodies(calib.begin(), calib.end());
    train::IntactKvCalOptions o;
    o.epochs = px.train_epochs;
    o.lr = px.train_lr;
    o.batch = px.train_batch;
    o.progress = [&progress](int e, int n, double) {
      if (progress) progress("prefix training (IntactKV+Cal), epoch", e, n);
    };
    const train::IntactKvCalResult r = train::train_intactkv(*rotated, *sm.model, *sm.prefix, bodies, o, &qsites, &fsites);
    sm.prefix = r.prefix;
    report["prefix_train"] = {{"epochs", o.epochs}, {"lr", o.lr}, {"batch", o.batch},
                              {"objective", "1/2 sum_l ||f_l(fp) - f_l(quant; prefix)||^2 per token (IntactKV eq. 2)"},
                              {"initial_loss", r.initial_loss}, {"epoch_loss", r.epoch_loss},
                              {"seconds", round4(seconds_since(t))}};
  }
  if (calibrate) {
    int64_t tokens = 0;
    for (const auto& s : calib) tokens += int64_t(s.size());
    report["samples"] = calib.size();
    if (px.on()) report["behind_prefix"] = px.source == PrefixSim::Source::Fp ? "fp prefix KV" : "prefix tokens inline";
    report["tokens"] = tokens;
    report["seconds"] = round4(seconds_since(t0));
    std::string sum;
    if (report.contains("weights"))
      sum += fmt::format("weights clip mean {} ({:.1f}% of rows/groups clipped)", report["weights"]["mean_ratio"].get<double>(),
                         100.0 * report["weights"]["clipped_fraction"].get<double>());
    if (report.contains("cross_columns"))
      sum += fmt::format("{}CrossQuant columns calibrated (alpha {})", sum.empty() ? "" : "; ", cfg.a.alpha);
    for (const char* part : {"activations", "kv"}) {
      if (!report.contains(part)) continue;
      for (const auto& [site, r] : report[part].items())
        sum += fmt::format("{}{} clip {}", sum.empty() ? "" : "; ", site, range_text(r.at("ratio")));
    }
    if (report.contains("kv_codebooks") && report["kv_codebooks"].contains("layers")) {
      double e[2] = {0, 0}, u[2] = {0, 0};
      for (const auto& l : report["kv_codebooks"]["layers"])
        for (int i = 0; i < 2; ++i)
          e[i] += l[i ? "v" : "k"]["error"].get<double>(), u[i] += l[i ? "v" : "k"]["error_uniform"].get<double>();
      sum += fmt::format("{}KV codebooks: normalised error K {:.3g} V {:.3g} (uniform levels: {:.3g} / {:.3g})",
                         sum.empty() ? "" : "; ", e[0] / mc.num_layers, e[1] / mc.num_layers, u[0] / mc.num_layers,
                         u[1] / mc.num_layers);
    }
    if (report.contains("finetune")) {
      double b = 0, a = 0;
      for (const auto& k : report["finetune"]["blocks"]) b += k["mse_before"].get<double>(), a += k["mse_after"].get<double>();
      sum += fmt::format("{}fine-tuned: block MSE (sum over blocks) {:.4g} -> {:.4g}", sum.empty() ? "" : "; ", b, a);
    }
    if (report.contains("prefix_train"))
      sum += fmt::format("{}prefix trained: loss {:.4g} -> {:.4g}", sum.empty() ? "" : "; ",
                         report["prefix_train"]["initial_loss"].get<double>(),
                         report["prefix_train"]["epoch_loss"].back().get<double>());
    report["summary"] = sum;
    sm.calibration_report = std::move(report);
  }
  return sm;
}

}  // namespace sinkq::quant
