// sinkq/quant/pipeline.h — from a configuration to a simulated quantized model: the one
// quantization pipeline of every command (ppl, generate, quantize) and of library callers.
//
// run_pipeline loads the calibration samples if the configuration (or `--prefix auto`) needs them,
// resolves the prefix tokens (calib/prefix.h: bos, ids, text, system, or PrefixQuant §5.1 on the
// calibration samples with the full-precision, unrotated model) and runs build_sim.
//   calib length: cfg.calib.len, else min(512, max_position_embeddings); with a prefix and no
//   given length, samples are then cut at the end so that P + body fits max_position_embeddings
//   (the body drops its leading [BOS] behind a prefix that holds one: quant/sim.h PrefixSim).
// Errors name the setting by its CLI flag (--calib-len, --prefix, ...). Notes go to stderr, each
// line starting with `log`; stage progress goes to `progress`.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "calib/calib_data.h"
#include "model/model.h"
#include "quant/sim.h"
#include "tokenizer/tokenizer.h"

namespace sinkq::quant {

struct PipelineOptions {
  bool calib_flags_given = false;  // calibration settings were given explicitly (a note if unused)
  std::string log = "quantize";    // prefix of the stderr notes
  std::function<void(const std::string& what, int64_t done, int64_t total)> progress;
};

struct Pipeline {
  SimModel sim;
  nlohmann::json calib_json;  // null when no calibration samples were loaded; else what was loaded
  CalibSet calib;             // the samples as loaded (with [BOS] when the tokenizer has one)
  // How the prefix was found: null without a prefix; else {"spec", "tokens", "texts", "source",
  // "how"} and, for auto, "found" (FoundPrefix::to_json: o, counts, ...).
  nlohmann::json prefix_json;
};

// cfg: validated, with the prefix as a spec only (cfg.prefix.spec; "" = none).
Pipeline run_pipeline(Recipe cfg, std::shared_ptr<const Model> model, const Tokenizer& tok,
                      const PipelineOptions& opt);

}  // namespace sinkq::quant
