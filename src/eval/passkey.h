// sinkq/eval/passkey.h — passkey retrieval (KVQuant §4.3, after Landmark Attention, Mohtashami &
// Jaggi 2023): a 5-digit key hidden at a chosen depth of filler text, asked for at the end; greedy
// decoding must reproduce it. Accuracy per (prompt length, depth), so the long-context cost of a
// KV quantizer shows as a heat map.
//
// Prompt (the Landmark / KVQuant wording), tokenized piece by piece so the length is exact:
//   [BOS when the tokenizer adds one] + intro + filler × a + key sentence + filler × b + question
//   intro    "There is an important info hidden inside a lot of irrelevant text. Find it and memorize
//             them. I will quiz you about the important information there."
//   filler   " The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again."
//   key      " The pass key is 12345. Remember it. 12345 is the pass key."
//   question " What is the pass key? The pass key is"
// a + b fillers bring the prompt as close to `length` tokens as whole fillers allow without going
// over; a = round(depth · (a + b)) (depth 0: the key right after the intro; 1: right before the
// question). The key is drawn uniformly from 10000..99999 per trial (seeded). Correct: the greedy
// continuation (up to 8 tokens, stopping at EOS), with leading spaces removed, starts with the key.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/model.h"

namespace sinkq {

class Tokenizer;

struct PasskeyOptions {
  std::vector<int64_t> lengths;  // prompt tokens (the engine's prefix not counted)
  std::vector<double> depths;    // in [0, 1]
  int trials = 3;
  uint64_t seed = 0;
  bool add_bos = false;
  std::vector<int32_t> stop_ids;
};

struct PasskeyPrompt {
  std::vector<int32_t> tokens;
  int64_t key_token = 0;  // where the key sentence starts
};
// The prompt of one trial; sinkq::Error when `length` cannot hold the intro, key and question.
PasskeyPrompt passkey_prompt(const Tokenizer& tok, bool add_bos, int64_t length, double depth, const std::string& key);

struct PasskeyCell {
  int64_t length = 0;  // asked
  double depth = 0;
  int correct = 0, trials = 0;
  std::vector<std::string> keys, answers;
  std::vector<int64_t> prompt_tokens;
};
struct PasskeyResult {
  std::vector<PasskeyCell> cells;  // lengths × depths, length-major
  double accuracy = 0;             // over every trial
  double seconds = 0;
  nlohmann::json to_json() const;
};

// Runs every (length, depth) cell on `fwd` (its context must hold the longest prompt + 8 tokens;
// checked first). progress(done, total) after each trial.
PasskeyResult run_passkey(Forward& fwd, const Tokenizer& tok, const PasskeyOptions& opt,
                          const std::function<void(int64_t, int64_t)>& progress = {});

}  // namespace sinkq
