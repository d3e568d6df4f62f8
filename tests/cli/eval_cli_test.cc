// `sinkq eval`: the same tasks on a simulated model and on its artifact (the packed runtime) give
// the same per-item log-likelihoods within the packed path's tolerance; --out writes its files;
// bad flags and inputs are errors naming them.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>

#include "cli/cli_run.h"
#include "util/testutil.h"

namespace sinkq {
namespace {

using clitest::expect_error;
using clitest::run;
using clitest::RunResult;
using nlohmann::json;

std::string stories() { return testing::shared_dir() + "/models/stories260K"; }
std::string data() { return testing::shared_dir() + "/data/commonsense"; }

// A PIQA-layout file of TinyStories-like items: stories260K's own kind of text (on text far from
// what it was trained on, its logits are so large that one int8 rounding-boundary flip of a
// dynamic activation code moves an item's log-likelihood by tenths of a nat, which would say
// nothing about the runtimes).
std::string story_tasks(const testing::TempDir& tmp) {
  const char* items[][3] = {{"Once upon a time there was a little girl", "named Lily.", "who liked to play."},
                            {"Lily and her mom went to the park", "to play on the swings.", "and saw a big dog."},
                            {"Tom had a red ball", "and he liked to throw it.", "that was very shiny."},
                            {"The sun was shining and the birds", "were singing.", "were happy."},
                            {"One day, a little bird", "flew to the tree.", "found a worm."},
                            {"Ben wanted to help his dad", "in the garden.", "with the big box."}};
  json a = json::array();
  for (const auto& it : items)
    a.push_back({{"instruction", std::string("Please choose the correct solution to the question: ") + it[0] +
                                     "\n\nSolution1: " + it[1] + "\n\nSolution2: " + it[2] +
                                     "\n\nAnswer format: solution1/solution2"},
                 {"answer", "solution1"}});
  std::filesystem::create_directories(tmp.file("piqa"));
  std::ofstream(tmp.file("piqa/test.json")) << a.dump();
  return tmp.path();
}

json eval_stories(const std::string& m, const std::string& dir, std::vector<std::string> extra) {
  std::vector<std::string> a{"eval", "-m", m, "--data", dir, "--tasks", "piqa", "--threads", "2", "--json", "--samples"};
  a.insert(a.end(), extra.begin(), extra.end());
  const RunResult r = run(a);
  EXPECT_EQ(r.rc, 0) << r.err;
  return r.rc == 0 ? json::parse(r.out) : json::object();
}

TEST(CliEval, ArtifactEqualsTheSimulatedRecipe) {
  testing::TempDir tmp;
  const std::string art = tmp.file("w8a8"), dir = story_tasks(tmp);
  // fp32 embeddings and lm_head: the default f16 storage of the artifact is a rounding the
  // simulator does not apply (it moves single tokens' log-probabilities by up to 0.2 nats here).
  const RunResult q =
      run({"quantize", "-m", stories(), "-o", art, "--preset", "w8a8", "--fp-dtype", "f32", "--threads", "2"});
  ASSERT_EQ(q.rc, 0) << q.err;
  const json sim = eval_stories(stories(), dir, {"--preset", "w8a8"}), packed = eval_stories(art, dir, {}),
             fp = eval_stories(stories(), dir, {});
  ASSERT_TRUE(sim.contains("tasks") && packed.contains("tasks") && fp.contains("tasks"));
  EXPECT_EQ(sim.at("runtime"), "simulated");
  EXPECT_EQ(packed.at("runtime"), "packed");
  const json& a = sim["tasks"][0];
  const json& b = packed["tasks"][0];
  const json& f = fp["tasks"][0];
  ASSERT_EQ(a["items"].size(), 6u);
  double worst = 0, moved = 0, ls = 0, lp = 0;
  for (size_t i = 0; i < 6; ++i)
    for (size_t c = 0; c < 2; ++c) {
      const double x = a["items"][i]["ll"][c], y = b["items"][i]["ll"][c], z = f["items"][i]["ll"][c];
      worst = std::max(worst, std::abs(x - y) / std::abs(x));
      moved = std::max(moved, std::abs(x - z) / std::abs(x));
      ls += x;
      lp += y;
      EXPECT_EQ(a["items"][i]["tokens"][c], b["items"][i]["tokens"][c]);
    }
  // Packed = simulated within fp32 summation order and the odd int8 rounding-boundary flip of a
  // dynamic activation code: over all 12 continuations within 2e-3 of the NLL (the bound of
  // quantize_cli_test's ppl comparisons); one item can take a whole flip (one token moved by a
  // code step: measured 2.2e-3 of an item's NLL), so 1e-2 per item. W8A8 itself moves items by
  // more than that (measured 2.4e-2).
  std::printf("  max relative |dll| per item: packed vs simulated %.2g, simulated vs fp %.2g\n", worst, moved);
  EXPECT_NEAR(lp, ls, 2e-3 * std::abs(ls));
  EXPECT_LE(worst, 1e-2);
  EXPECT_GT(moved, 1e-2);
}

TEST(CliEval, OutWritesTheTablesAndPlots) {
  testing::TempDir tmp;
  const std::string out = tmp.file("res");
  const RunResult r = run({"eval", "-m", stories(), "--data", data(), "--tasks", "boolq,piqa", "--limit", "3", "--out",
                           out, "--ppl", "sample=" + testing::shared_dir() + "/golden/stories260K/tinystories_sample.txt",
                           "--ppl-ctx", "128", "--ppl-windows", "2", "--passkey", "200", "--passkey-depths", "0,1",
                           "--passkey-trials", "1"});
  ASSERT_EQ(r.rc, 0) << r.err;
  for (const char* f : {"results.json", "results.csv", "results.md", "acc.svg", "passkey.svg"})
    EXPECT_TRUE(std::filesystem::exists(out + "/" + f)) << f;
  const json j = json::parse(read_file(out + "/results.json"));
  EXPECT_EQ(j["tasks"].size(), 2u);
  EXPECT_EQ(j["tasks"][0]["items"].size(), 3u);  // every item in the file
  EXPECT_EQ(j["ppl"][0]["windows"], 2);
  EXPECT_EQ(j["passkey"]["cells"].size(), 2u);
  EXPECT_NE(read_file(out + "/results.md").find("| boolq (question only) | 3 |"), std::string::npos);
  EXPECT_NE(r.out.find("| piqa | 3 |"), std::string::npos) << r.out;
  // An output directory that is not empty is refused before anything runs.
  expect_error(run({"eval", "-m", stories(), "--data", data(), "--tasks", "piqa", "--out", out}), {"--out", "not empty"});
}

TEST(CliEval, BadFlagsAndInputsAreErrors) {
  const std::string m = stories();
  expect_error(run({"eval", "-m", m}), {"nothing to evaluate"});
  expect_error(run({"eval", "-m", m, "--tasks", "piqa,hellaswag"}), {"--tasks", "unknown task 'hellaswag'"});
  expect_error(run({"eval", "-m", m, "--tasks", "piqa", "--data", "/nonexistent"}), {"--data '/nonexistent'"});
  // --data is the tasks' only: without --tasks it is not read (a passkey run from any directory).
  const RunResult pk = run({"eval", "-m", m, "--data", "/nonexistent", "--passkey", "200", "--passkey-depths", "0",
                            "--passkey-trials", "1", "--json"});
  EXPECT_EQ(pk.rc, 0) << pk.err;
  expect_error(run({"eval", "-m", m, "--tasks", "piqa", "--data", data(), "--kld"}), {"--kld needs --ppl"});
  expect_error(run({"eval", "-m", m, "--passkey", "300", "--passkey-depths", "0,2"}), {"--passkey-depths", "'2'"});
  expect_error(run({"eval", "-m", m, "--passkey", "0x10"}), {"--passkey"});
  expect_error(run({"eval", "-m", m, "--passkey", "5000"}), {"--passkey 5000", "does not fit"});
  expect_error(run({"eval", "-m", m, "--chat", "2"}), {"--chat", "chat template"});
  expect_error(run({"eval", "-m", m, "--ppl", "wiki"}), {"--ppl 'wiki'", "NAME=FILE"});
  expect_error(run({"eval", "-m", m, "--ppl", "w=/nonexistent.txt"}), {"--ppl w", "/nonexistent.txt"});
  expect_error(run({"eval", "-m", m, "--tasks", "piqa", "--limit", "-1"}), {"--limit"});
  // A task file that is not the layout: the file, the item and the field.
  testing::TempDir tmp;
  std::filesystem::create_directories(tmp.file("piqa"));
  std::ofstream(tmp.file("piqa/test.json")) << R"([{"instruction": "Please choose the correct solution to the question: )"
                                                R"(x\n\nSolution1: a\n\nAnswer format: solution1/solution2", "answer": "solution1"}])";
  expect_error(run({"eval", "-m", m, "--tasks", "piqa", "--data", tmp.path()}), {"piqa/test.json item 0", "Solution2"});
}

}  // namespace
}  // namespace sinkq
