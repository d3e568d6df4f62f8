// Zero-shot multiple-choice tasks (src/eval/tasks.h): the choice parsing of each task's
// LLM-Adapters layout into lm-eval's prompts, acc / acc_norm arithmetic, lm-eval's stderr,
// _encode_pair, WinoGrande's partial scoring, and the shared-context scoring against scoring each
// request from an empty cache.
#include "eval/tasks.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "eval/ppl.h"
#include "tokenizer/tokenizer.h"
#include "util/testutil.h"

namespace sinkq {
namespace {

using testing::error_of;

McItem parse(McTask t, const std::string& ins, const std::string& answer) {
  return parse_mc_item(t, {{"instruction", ins}, {"input", ""}, {"output", "x"}, {"answer", answer}}, "test item");
}

TEST(McParse, ArcPromptAndChoicesVerbatim) {
  // Choice texts are kept verbatim between the markers (a trailing space stays: the original
  // dataset has such texts and lm-eval scores them as they are).
  const McItem it = parse(McTask::ArcEasy,
                          "Please choose the correct answer to the question: Which is hot?\n\nAnswer1: ice "
                          "Answer2: the Sun  Answer3: snow\n\nAnswer format: answer1/answer2/answer3",
                          "answer2");
  ASSERT_EQ(it.choices.size(), 3u);
  EXPECT_EQ(it.choices[0], "ice");
  EXPECT_EQ(it.choices[1], "the Sun ");
  EXPECT_EQ(it.choices[2], "snow");
  EXPECT_EQ(it.gold, 1);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(it.contexts[i], "Question: Which is hot?\nAnswer:");
    EXPECT_EQ(it.continuations[i], " " + it.choices[i]);
  }
  // Five choices (some ARC items) and the other prompts of the same layout.
  const std::string five = "Please choose the correct answer to the question: Q\n\nAnswer1: a Answer2: b Answer3: c "
                           "Answer4: d Answer5: e\n\nAnswer format: answer1/answer2/answer3/answer4/answer5";
  EXPECT_EQ(parse(McTask::ArcChallenge, five, "answer5").gold, 4);
  EXPECT_EQ(parse(McTask::ArcChallenge, five, "answer5").choices.back(), "e");
  EXPECT_EQ(parse(McTask::Openbookqa, five, "answer1").contexts[0], "Q");                      // question_stem
  EXPECT_EQ(parse(McTask::SocialIqa, five, "answer1").contexts[0], "Q: Q\nA:");               // siqa
}

TEST(McParse, PiqaBoolqWinogrande) {
  const McItem p = parse(McTask::Piqa,
                         "Please choose the correct solution to the question: dresser\n\nSolution1: replace drawer "
                         "\n\nSolution2: finish,  pin \n\nAnswer format: solution1/solution2",
                         "solution2");
  EXPECT_EQ(p.contexts[0], "Question: dresser\nAnswer:");
  EXPECT_EQ(p.choices, (std::vector<std::string>{"replace drawer ", "finish,  pin "}));
  EXPECT_EQ(p.gold, 1);

  const McItem b = parse(McTask::Boolq,
                         "Please answer the following question with true or false, question: is it so?\n\nAnswer "
                         "format: true/false",
                         "true");
  EXPECT_EQ(b.contexts[0], "Question: is it so?\nAnswer:");
  EXPECT_EQ(b.choices, (std::vector<std::string>{"no", "yes"}));
  EXPECT_EQ(b.gold, 1);
  EXPECT_EQ(parse(McTask::Boolq,
                  "Please answer the following question with true or false, question: q?\n\nAnswer format: true/false",
                  "false")
                .gold,
            0);

  // WinoGrande's partial scoring: the option goes into the context (the sentence up to the first
  // blank), the continuation is the rest of the sentence, stripped, after the delimiter.
  const McItem w = parse(McTask::Winogrande,
                         "Please choose the correct answer to fill in the blank to complete the given sentence: Sarah "
                         "beat Maria so _ got the  cup. \n\nOption1: Sarah Option2: Maria Answer format: option1/option2",
                         "option1");
  EXPECT_EQ(w.contexts, (std::vector<std::string>{"Sarah beat Maria so Sarah", "Sarah beat Maria so Maria"}));
  EXPECT_EQ(w.continuations, (std::vector<std::string>{" got the  cup.", " got the  cup."}));
  EXPECT_EQ(w.choices, w.contexts);  // lm-eval's doc_to_choice (acc_norm's lengths, unused: acc only)
  EXPECT_EQ(w.gold, 0);
}

TEST(McParse, ErrorsNameTheItemAndWhatIsMissing) {
  const std::string arc = "Please choose the correct answer to the question: Q\n\nAnswer1: a Answer2: b\n\nAnswer "
                          "format: answer1/answer2";
  EXPECT_NE(error_of([&] { parse(McTask::ArcEasy, arc, "answer3"); }).find("test item field 'answer'"),
            std::string::npos);
  EXPECT_NE(error_of([&] { parse(McTask::ArcEasy, "Please choose the correct answer to the question: Q\n\nAnswer1: a "
                                                  "Answer3: b\n\nAnswer format: answer1/answer2",
                                 "answer1"); })
                .find("Answer2"),
            std::string::npos);
  EXPECT_NE(error_of([&] { parse(McTask::Piqa, arc, "solution1"); }).find("test item"), std::string::npos);
  EXPECT_NE(error_of([&] { parse(McTask::Winogrande,
                                 "Please choose the correct answer to fill in the blank to complete the given "
                                 "sentence: no blank\n\nOption1: a Option2: b Answer format: option1/option2",
                                 "option1"); })
                .find("no blank"),
            std::string::npos);
  EXPECT_NE(error_of([&] { parse_mc_item(McTask::Boolq, {{"instruction", 3}}, "x.json item 7"); })
                .find("x.json item 7: field 'instruction'"),
            std::string::npos);
  EXPECT_NE(error_of([&] { parse_mc_tasks("piqa,hellaswag"); }).find("unknown task 'hellaswag'"), std::string::npos);
  EXPECT_NE(error_of([&] { parse_mc_tasks("piqa,piqa"); }).find("twice"), std::string::npos);
  EXPECT_EQ(parse_mc_tasks("all").size(), 7u);
}

// Every item of the seven files parses, with the counts ../shared/data/README.md's sources have.
TEST(McParse, EveryItemOfTheSharedFiles) {
  const std::string dir = testing::shared_dir() + "/data/commonsense";
  const std::map<std::string, std::pair<size_t, size_t>> want = {
      {"piqa", {1838, 2}},       {"arc_easy", {2376, 0}},   {"arc_challenge", {1172, 0}}, {"winogrande", {1267, 2}},
      {"boolq", {3270, 2}},      {"openbookqa", {500, 4}},  {"social_iqa", {1954, 3}}};
  for (const McTaskInfo& t : mc_tasks()) {
    SCOPED_TRACE(t.name);
    const std::vector<McItem> items = load_mc_task(t, dir, 0);
    EXPECT_EQ(items.size(), want.at(t.name).first);
    for (const McItem& it : items) {
      if (want.at(t.name).second) {
        EXPECT_EQ(it.choices.size(), want.at(t.name).second) << it.index;
      }
      EXPECT_GE(it.choices.size(), 2u);
      EXPECT_GE(it.gold, 0);
      EXPECT_LT(it.gold, int(it.choices.size()));
      for (const std::string& c : it.choices) EXPECT_FALSE(c.empty()) << it.index;
    }
  }
  EXPECT_EQ(load_mc_task(mc_tasks()[0], dir, 5).size(), 5u);
  EXPECT_NE(error_of([&] { load_mc_task(mc_tasks()[0], "/nonexistent", 0); }).find("/nonexistent/piqa/test.json"),
            std::string::npos);
}

ContinuationScore score(double lp) {
  ContinuationScore s;
  s.logprob = lp;
  s.token_logprobs = {lp};
  return s;
}

TEST(McDecide, AccAndAccNormArithmetic) {
  McItem it;
  it.choices = {"a", "bbbb", "éé"};  // 1, 4 and 2 characters (é is two bytes: characters count)
  it.gold = 1;
  // acc: −2 > −3 > −4 → choice 0. acc_norm: −2/1, −4/4 = −1, −3/2 = −1.5 → choice 1.
  McItemResult r = mc_decide(it, {score(-2), score(-4), score(-3)});
  EXPECT_EQ(r.pred, 0);
  EXPECT_EQ(r.pred_norm, 1);
  EXPECT_EQ(r.chars, (std::vector<int64_t>{1, 4, 2}));
  // A tie goes to the first (np.argmax).
  r = mc_decide(it, {score(-4), score(-4), score(-9)});
  EXPECT_EQ(r.pred, 0);
  EXPECT_EQ(utf8_length("naïve 日本"), 8);
}

TEST(McDecide, MeanStderrIsLmEvals) {
  // [1, 0, 1, 1]: mean 0.75; sample sd sqrt((3·0.0625 + 0.5625) / 3) = 0.5; / sqrt(4) = 0.25.
  const auto [m, se] = mean_stderr({1, 0, 1, 1});
  EXPECT_DOUBLE_EQ(m, 0.75);
  EXPECT_DOUBLE_EQ(se, 0.25);
  EXPECT_TRUE(std::isnan(mean_stderr({1}).second));  // lm-eval: "N/A" for one item
}

TEST(EncodePair, TrailingSpacesMoveToTheContinuation) {
  const auto tok = Tokenizer::load(testing::shared_dir() + "/models/smollm2-135m-instruct-q4_1/model.gguf");
  const EncodeOptions raw{.add_special = false, .parse_special = false};
  // "Answer: " + "yes": the space goes to the continuation, so the context ends at "Answer:".
  const auto [c, k] = encode_pair(*tok, false, "Question: is it?\nAnswer: ", "yes");
  EXPECT_EQ(c, tok->encode("Question: is it?\nAnswer:", raw));
  const std::vector<int32_t> whole = tok->encode("Question: is it?\nAnswer: yes", raw);
  EXPECT_EQ(c.size() + k.size(), whole.size());
  EXPECT_EQ(k, std::vector<int32_t>(whole.begin() + int64_t(c.size()), whole.end()));
  EXPECT_EQ(tok->decode(k), " yes");
  // The tokenizer's BOS first in both when asked.
  const auto [cb, kb] = encode_pair(*tok, true, "Question: is it?\nAnswer:", " yes");
  EXPECT_EQ(cb.front(), tok->bos_id());
  EXPECT_EQ(kb, k);
}

// score_requests with the shared context computed once (and the cache rewound) equals scoring
// each request alone from an empty cache, to fp32 summation order: the two run the context in
// different chunks (the shared part, then the rest), so GEMM blocking differs; stories260K's
// logits are O(10) and an fp32 chunking difference moves them by ~1e-6 relative, so 1e-4 per
// token is two orders of margin while a wrong position or a stale row moves them by ≥ 1e-2.
TEST(ScoreRequests, SharedContextEqualsEachRequestAlone) {
  const std::string dir = testing::shared_dir() + "/models/stories260K";
  const auto m = Model::load(dir);
  const auto tok = Tokenizer::load(dir);
  const EncodeOptions raw{.add_special = false, .parse_special = false};
  auto enc = [&](const char* s) { return tok->encode(s, raw); };
  std::vector<ScoreRequest> reqs = {{enc("Once upon a time there was a little girl"), enc(" named Lily")},
                                    {enc("Once upon a time there was a little girl"), enc(" who liked to run")},
                                    {enc("Once upon a time there was a big dog"), enc(" named Lily")}};
  Forward f(m, 64);
  int64_t run = 0;
  const std::vector<ContinuationScore> shared = score_requests(f, reqs, &run);
  int64_t alone_run = 0;
  int decided = 0;  // requests whose greedy flag the definition decides
  for (size_t r = 0; r < reqs.size(); ++r) {
    const ContinuationScore a = score_requests(f, {reqs[r]}, &alone_run)[0];
    ASSERT_EQ(a.token_logprobs.size(), reqs[r].continuation.size());
    ASSERT_EQ(shared[r].token_logprobs.size(), a.token_logprobs.size());
    for (size_t j = 0; j < a.token_logprobs.size(); ++j) EXPECT_NEAR(shared[r].token_logprobs[j], a.token_logprobs[j], 1e-4);
    EXPECT_NEAR(shared[r].logprob, a.logprob, 1e-4 * double(a.token_logprobs.size()));
    // And against the definition: one step over the whole sequence, every logit kept.
    std::vector<int32_t> seq = reqs[r].context;
    seq.insert(seq.end(), reqs[r].continuation.begin(), reqs[r].continuation.end());
    f.reset();
    const auto logits = f.step(seq, true);
    const int64_t V = m->config().vocab_size, c = int64_t(reqs[r].context.size());
    double want = 0;
    // The greedy flag (every continuation token the argmax) where the definition's logits decide it
    // beyond summation order: the three runs chunk the sequence differently, which moves a logit by
    // ~1e-5 (1e-6 relative of O(10)), so a token whose logit is 1e-3 or more above (below) every
    // other's is the argmax (is not) in all three; only a near-tie leaves the flag open.
    bool all_clear_argmax = true, some_clear_loser = false;
    for (int64_t j = c; j < int64_t(seq.size()); ++j) {
      const float* row = logits.data() + (j - 1) * V;
      want -= token_nll(row, V, seq[size_t(j)]);
      float other = -INFINITY;
      for (int64_t v = 0; v < V; ++v)
        if (v != seq[size_t(j)]) other = std::max(other, row[v]);
      const double margin = double(row[seq[size_t(j)]]) - double(other);
      all_clear_argmax = all_clear_argmax && margin > 1e-3;
      some_clear_loser = some_clear_loser || margin < -1e-3;
    }
    EXPECT_NEAR(a.logprob, want, 1e-4 * double(a.token_logprobs.size()));
    if (all_clear_argmax || some_clear_loser) {
      ++decided;
      EXPECT_EQ(a.greedy, all_clear_argmax) << "request " << r;
      EXPECT_EQ(shared[r].greedy, all_clear_argmax) << "request " << r;
    }
  }
  EXPECT_EQ(decided, int(reqs.size()));  // none of these three sits on a near-tie
  EXPECT_LT(run, alone_run);  // the shared context ran once
  // The requests differ: the scores are not all the same number.
  EXPECT_NE(shared[0].logprob, shared[1].logprob);
  EXPECT_NE(shared[0].logprob, shared[2].logprob);
  EXPECT_NE(error_of([&] { score_requests(f, {{{}, enc(" x")}}); }).find("empty context"), std::string::npos);
  EXPECT_NE(error_of([&] { score_requests(f, {{enc("a"), {}}}); }).find("empty continuation"), std::string::npos);
  std::vector<int32_t> longer(80, reqs[0].context[0]);
  EXPECT_NE(error_of([&] { score_requests(f, {{longer, enc(" x")}}); }).find("does not fit"), std::string::npos);
}

}  // namespace
}  // namespace sinkq
