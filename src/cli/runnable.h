// sinkq/cli/runnable.h — what a model command runs, from either a model directory (full
// precision) or a sinkq artifact (runtime/artifact.h: packed linears, online rotations, KV prefix).
//
// Wiring a command: replace Model::load(dir) + Tokenizer::load(dir) by load_runnable(dir), create
// the Forward on r.model and call r.attach(fwd) before the first step (it registers the artifact's
// online rotations and puts its prefix in front; a no-op for a model directory). A prompt behind a
// prefix that holds [BOS] should be encoded without BOS (quant/sim.h PrefixSim::strips_bos).
#pragma once

#include <nlohmann/json.hpp>

#include <functional>
#include <memory>
#include <string>

#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace sinkq::cli {

struct Runnable {
  std::shared_ptr<const Model> model;
  std::shared_ptr<const Tokenizer> tokenizer;
  std::function<void(Forward&)> attach;      // never empty
  std::shared_ptr<const KvPrefix> prefix;    // the artifact's KV prefix (null: none)
  bool prefix_has_bos = false;               // the prefix holds the tokenizer's [BOS]
  bool is_artifact = false;
  std::string description;                   // "model DIR" | "artifact DIR: W4 per-channel sym | A8 ..."
  nlohmann::json recipe;                     // the artifact's sinkq_recipe.json (null for a model dir)
};

// A model directory or an artifact (runtime/artifact.h is_artifact), loaded and validated; errors
// name the directory and what is wrong.
Runnable load_runnable(const std::string& dir);

}  // namespace sinkq::cli
