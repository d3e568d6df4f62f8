// sinkq's zero-shot scoring (src/eval/tasks.h) against the real lm-evaluation-harness: per-choice
// log-likelihoods, is_greedy flags and predictions of SmolLM2-135M-Instruct (the dequantized
// GGUF) on the first items of the seven tasks, as lm-eval 0.4.13's HFLM computed them with
// transformers 5.24 in float32 (tests/data/lmeval/smollm2_fp.json, made by bench/lmeval: the task
// definitions, the run and the summary are there; docs/eval.md has the whole-run comparison).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>

#include "core/mmap.h"
#include "eval/tasks.h"
#include "tokenizer/tokenizer.h"
#include "util/testutil.h"

namespace sinkq {
namespace {

std::string reference_file() {
  return (std::filesystem::path(__FILE__).parent_path().parent_path() / "data" / "lmeval" / "smollm2_fp.json").string();
}

TEST(LmEvalReference, SmolLM2ItemsMatchTheHarness) {
  const nlohmann::json ref = nlohmann::json::parse(read_file(reference_file()));
  const std::string gguf = testing::shared_dir() + "/models/smollm2-135m-instruct-q4_1/model.gguf";
  const auto m = Model::load(gguf);
  const auto tok = Tokenizer::load(gguf);
  ASSERT_FALSE(tok->add_bos());  // SmolLM2 adds no BOS: neither does HFLM
  Forward f(m, 512);
  // The first kItems of each task (the file holds 50: ~0.3 s an item here, so all of them take
  // ~2 min; docs/eval.md compares all 350, and 5 a task keep the suite quick).
  constexpr int64_t kItems = 5;
  int64_t choices = 0;
  double worst = 0;
  for (const McTaskInfo& t : mc_tasks()) {
    SCOPED_TRACE(t.name);
    const nlohmann::json& rt = ref.at("tasks").at(t.name);
    const std::vector<McItem> items = load_mc_task(t, testing::shared_dir() + "/data/commonsense", kItems);
    const McTaskResult r = run_mc_task(f, *tok, /*add_bos=*/false, t, items);
    ASSERT_EQ(r.items.size(), size_t(kItems));
    for (const McItemResult& it : r.items) {
      const nlohmann::json& ri = rt.at(size_t(it.index));
      ASSERT_EQ(ri.at("doc_id").get<int64_t>(), it.index);
      EXPECT_EQ(ri.at("gold").get<int>(), it.gold) << "item " << it.index;
      const std::vector<double> ll = ri.at("ll");
      const std::vector<bool> greedy = ri.at("greedy");
      ASSERT_EQ(ll.size(), it.ll.size()) << "item " << it.index;
      for (size_t c = 0; c < ll.size(); ++c) {
        // Two fp32 implementations: logits agree within 2e-4 (the golden logits test's bound), so
        // each token's log-probability (a logit minus a logsumexp) within 4e-4, summed over the
        // continuation's tokens.
        EXPECT_NEAR(it.ll[c], ll[c], 4e-4 * double(it.tokens[c])) << "item " << it.index << " choice " << c;
        EXPECT_EQ(it.greedy[c], greedy[c]) << "item " << it.index << " choice " << c;
        worst = std::max(worst, std::abs(it.ll[c] - ll[c]));
        ++choices;
      }
      EXPECT_EQ(it.pred, int(std::max_element(ll.begin(), ll.end()) - ll.begin())) << "item " << it.index;
    }
  }
  std::printf("  %lld choices: max |ll - lm-eval's| %.2g nats\n", (long long)choices, worst);
}

}  // namespace
}  // namespace sinkq
