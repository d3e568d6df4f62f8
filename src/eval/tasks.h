// sinkq/eval/tasks.h — zero-shot multiple-choice tasks scored as lm-evaluation-harness v0.4 does
// (the papers' PIQA / ARC / WinoGrande / BoolQ / OBQA / SIQA columns), over the LLM-Adapters
// files of ../shared/data/commonsense/<task>/test.json. docs/eval.md has the prompts, the parsing
// and every convention with its lm-eval source.
//
// An item is a list of requests (context, continuation), one per choice. Tokens as lm-eval's
// HFLM makes them (_encode_pair): trailing spaces of the context move to the continuation;
// context_ids = encode(context), continuation_ids = encode(context + continuation) past
// len(context_ids); encode adds the tokenizer's BOS when it adds one by default (HFLM since
// v0.4.9.2; SmolLM2's and GPT-2's add none) unless the engine's KV prefix holds it (a method's
// prefix sits before every request). A choice's log-likelihood is the sum of
// log p(continuation token | everything before it), in double; greedy = every continuation token
// is the argmax. acc = [argmax ll == gold]; acc_norm = [argmax ll / len(choice) == gold] with
// len the choice string's length in characters (Unicode code points: Python's len()), the
// delimiter not counted; stderr = sample standard deviation (n − 1) / sqrt(n).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/model.h"

namespace sinkq {

class Tokenizer;

enum class McTask { Piqa, ArcEasy, ArcChallenge, Winogrande, Boolq, Openbookqa, SocialIqa };

struct McTaskInfo {
  McTask task;
  const char* name;     // lm-eval's task name: piqa, arc_easy, ..., social_iqa (also --tasks)
  const char* dir;      // its folder under the commonsense data directory
  const char* display;  // for tables: "boolq (question only)"
  bool acc_norm;        // whether lm-eval reports acc_norm for it
};
const std::vector<McTaskInfo>& mc_tasks();
// By name (or "all" → every task); sinkq::Error listing the names for anything else.
std::vector<McTaskInfo> parse_mc_tasks(const std::string& comma_list);

struct McItem {
  int64_t index = 0;                       // position in the file
  std::vector<std::string> contexts;       // one per choice (WinoGrande: the option substituted)
  std::vector<std::string> continuations;  // one per choice, the delimiter " " included
  std::vector<std::string> choices;        // lm-eval's doc_to_choice strings (acc_norm lengths)
  int gold = 0;
};

// Parses one LLM-Adapters record {instruction, answer} of a task into lm-eval's prompt and
// choices; sinkq::Error naming `where` (file and item) and the field on anything it cannot read.
McItem parse_mc_item(McTask task, const nlohmann::json& record, const std::string& where);
// The first `limit` items (0 = all) of <data_dir>/<task dir>/test.json.
std::vector<McItem> load_mc_task(const McTaskInfo& t, const std::string& data_dir, int64_t limit);

// lm-eval's _encode_pair: (context ids, continuation ids); add_bos: the tokenizer's BOS first.
std::pair<std::vector<int32_t>, std::vector<int32_t>> encode_pair(const Tokenizer& tok, bool add_bos,
                                                                  std::string_view context,
                                                                  std::string_view continuation);

// A teacher-forced scoring request: sequence = context ++ continuation; what is scored is
// log p(seq[j] | seq[0..j)) for j in [context size, sequence size).
struct ScoreRequest {
  std::vector<int32_t> context, continuation;
};
struct ContinuationScore {
  double logprob = 0;  // sum over the continuation's tokens
  bool greedy = true;  // every continuation token was the argmax
  std::vector<double> token_logprobs;
};
// Scores requests that share a beginning (one item's choices) on `fwd` (its prefix in front): the
// longest common token prefix of the inputs is computed once and the body rewound to it before
// each request (Forward::truncate); a store that cannot rewind recomputes from the start. The
// shared part stops before every request's last context token, so every scored logit comes out
// of a request's own step (one code path per request, whatever the others are). The results do
// not depend on the order or on the other requests beyond fp32 summation order. Errors: a request
// with an empty context or continuation, or longer than the forward's context. *tokens_run (if
// given) is increased by the tokens fed to the model.
std::vector<ContinuationScore> score_requests(Forward& fwd, const std::vector<ScoreRequest>& reqs,
                                              int64_t* tokens_run = nullptr);

struct McItemResult {
  int64_t index = 0;
  int gold = 0, pred = 0, pred_norm = 0;
  std::vector<double> ll;       // per choice
  std::vector<bool> greedy;     // per choice
  std::vector<int64_t> chars;   // per choice: acc_norm's length
  std::vector<int64_t> tokens;  // per choice: continuation tokens
};
// acc / acc_norm of one item from its log-likelihoods (np.argmax: the first maximum wins).
McItemResult mc_decide(const McItem& item, const std::vector<ContinuationScore>& scores);

struct McTaskResult {
  McTaskInfo info;
  int64_t n = 0;
  double acc = 0, acc_stderr = 0, acc_norm = 0, acc_norm_stderr = 0;
  double seconds = 0;
  int64_t tokens = 0;  // tokens run through the model (shared contexts once)
  std::vector<McItemResult> items;
};
// Mean and lm-eval's mean_stderr (sample standard deviation with n − 1, over sqrt(n)).
std::pair<double, double> mean_stderr(const std::vector<double>& x);
// Number of Unicode code points of UTF-8 text (Python's len(); an invalid byte counts as one).
int64_t utf8_length(std::string_view s);

// Runs a task's items on `fwd`; progress(done, total) after each item.
McTaskResult run_mc_task(Forward& fwd, const Tokenizer& tok, bool add_bos, const McTaskInfo& t, const std::vector<McItem>& items,
                         const std::function<void(int64_t, int64_t)>& progress = {});

}  // namespace sinkq
