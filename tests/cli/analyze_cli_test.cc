// `sinkq analyze` end to end: --json, --out (report.json + SVG plots), planted outlier tokens,
// and bad inputs (exit 1, a message naming the flag or file, no crash).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>

#include "core/mmap.h"
#include "util/planted.h"
#include "cli/cli_run.h"
#include "util/testutil.h"

namespace sinkq {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

using clitest::expect_error;
using clitest::run;
using clitest::RunResult;

std::string stories() { return testing::shared_dir() + "/models/stories260K"; }
std::string wikitext() { return testing::shared_dir() + "/data/wikitext-2/wikitext2_test_joined.txt"; }

// Small and quick: 2 samples of 64 tokens.
std::vector<std::string> base_args() {
  return {"analyze", "-m", stories(), "--data", wikitext(), "--samples", "2", "--len", "64"};
}
std::vector<std::string> with(std::vector<std::string> a, const std::vector<std::string>& more) {
  a.insert(a.end(), more.begin(), more.end());
  return a;
}

TEST(CliAnalyze, JsonHasTheWholeReport) {
  const RunResult r = run(with(base_args(), {"--json", "--threads", "1"}));
  ASSERT_EQ(r.rc, 0) << r.err;
  const json j = json::parse(r.out);
  for (const char* key : {"eta", "bits", "alphas", "samples", "len", "model", "sites", "layers", "outliers", "data",
                          "model_dir"})
    EXPECT_TRUE(j.contains(key)) << key;
  EXPECT_EQ(j["samples"], 2);
  EXPECT_EQ(j["len"], 64);
  EXPECT_EQ(j["eta"], 64.0);
  EXPECT_EQ(j["bits"], 4);
  EXPECT_EQ(j["alphas"], json({0.15, 0.45, 0.75, 1.0}));
  EXPECT_EQ(j["data"]["format"], "text");
  EXPECT_EQ(j["data"]["bos"], true);
  ASSERT_EQ(j["layers"].size(), 5u);  // stories260K: 5 layers, 8 heads
  for (const auto& l : j["layers"]) {
    EXPECT_EQ(l["token_max"].size(), 9u);
    EXPECT_EQ(l["token_max"]["down_in"]["tokens"], 128);
    EXPECT_EQ(l["attention"]["to_first"].size(), 8u);
    EXPECT_EQ(l["kernel"].size(), 4u);
    // α = 1 is per-token quantization bit for bit.
    EXPECT_EQ(l["kernel"]["mlp_in"]["crossquant"][3]["zeroed"], l["kernel"]["mlp_in"]["per_token_zeroed"]);
  }
  EXPECT_TRUE(j["outliers"]["tokens"].empty());  // models/README.md: no outlier tokens
  EXPECT_NE(r.err.find("analyze: sample 2/2"), std::string::npos) << "progress on stderr: " << r.err;
}

TEST(CliAnalyze, TextSummaryAndOutDirectory) {
  testing::TempDir d;
  const std::string out = d.file("plots");
  const RunResult r = run(with(base_args(), {"--out", out, "--alpha", "0.15,1", "--bits", "3"}));
  ASSERT_EQ(r.rc, 0) << r.err;
  for (const char* needle : {"top-1 / median", "outlier tokens at down_in", "attention mass on token 0",
                             "quantization kernel at 3 bits", "a=0.15"})
    EXPECT_NE(r.out.find(needle), std::string::npos) << needle << "\n" << r.out;
  const json j = json::parse(read_file(out + "/report.json"));
  EXPECT_EQ(j["alphas"], json({0.15, 1.0}));
  EXPECT_EQ(j["bits"], 3);
  std::set<std::string> svgs;
  for (const auto& e : fs::directory_iterator(out)) {
    if (e.path().extension() != ".svg") continue;
    svgs.insert(e.path().filename().string());
    const std::string s = read_file(e.path().string());
    EXPECT_EQ(s.rfind("<svg", 0), 0u) << e.path();
    EXPECT_EQ(s.substr(s.size() - 7), "</svg>\n") << e.path();
    EXPECT_NE(s.find("xmlns=\"http://www.w3.org/2000/svg\""), std::string::npos);
    EXPECT_EQ(testing::xml_wellformedness_error(s), "") << e.path();
  }
  for (const char* f : {"token_max_down_in.svg", "token_max_q.svg", "attention_token0.svg", "kernel_down_in.svg"})
    EXPECT_TRUE(svgs.count(f)) << f;
  EXPECT_EQ(svgs.size(), 14u);
  // Only the directory itself was created beside it: no temporary left over.
  EXPECT_EQ(std::distance(fs::directory_iterator(d.path()), fs::directory_iterator()), 1);
}

TEST(CliAnalyze, FindsPlantedOutlierTokensInText) {
  testing::TempDir d;
  testing::PlantedOutlierSpec s;
  s.base.layers = 3;
  s.token_ids = {317, 426};  // "▁Lily", "."
  s.layers = {2};
  testing::write_planted_model(d.path(), s);
  std::ofstream(d.file("story.txt"))
      << "Once upon a time, there was a girl named Lily. Lily liked to play in the park with her friends. "
         "One day, Lily saw a big red ball under a tree. She ran to get it. The ball was soft and round.\n";
  // The paper's site alone: the planted tokens' marker (8 vs O(0.1)) also crosses η in layer 0's
  // residual stream, which the default sites count too (analyze_test tests that site).
  const RunResult r = run({"analyze", "-m", d.path(), "--data", d.file("story.txt"), "--samples", "3", "--len", "24",
                           "--outlier-sites", "down_in", "--json"});
  ASSERT_EQ(r.rc, 0) << r.err;
  const json j = json::parse(r.out);
  ASSERT_FALSE(j["outliers"]["tokens"].empty());
  for (const auto& t : j["outliers"]["tokens"]) {
    EXPECT_EQ(t["layer"], 2);
    EXPECT_TRUE(t["token_id"] == 317 || t["token_id"] == 426) << t;
    EXPECT_GE(t["ratio"].get<double>(), 100.0);
  }
  EXPECT_EQ(j["layers"][2]["outliers"]["count"], j["outliers"]["tokens"].size());
  EXPECT_EQ(j["layers"][0]["outliers"]["count"], 0);
  EXPECT_EQ(j["layers"][1]["outliers"]["count"], 0);
  std::set<std::string> texts;
  for (const auto& c : j["outliers"]["counts"]) texts.insert(c["text"].get<std::string>());
  EXPECT_TRUE(texts.count(".")) << j["outliers"]["counts"];
}

TEST(CliAnalyze, BadInputsGiveClearErrors) {
  expect_error(run(with(base_args(), {"--alpha", "0.15,abc"})), {"--alpha", "'abc' is not a number"});
  expect_error(run(with(base_args(), {"--alpha", "0.5,1.5"})), {"--alpha", "1.5 is outside [0, 1]"});
  expect_error(run(with(base_args(), {"--alpha", "0.5,"})), {"--alpha", "empty item"});
  expect_error(run({"analyze", "-m", stories()}), {"--data", "required"});
  expect_error(run({"analyze", "--data", wikitext()}), {"--model", "required"});
  expect_error(run(with(base_args(), {"--eta", "0"})), {"--eta"});
  expect_error(run(with(base_args(), {"--bits", "9"})), {"--bits"});
  expect_error(run(with(base_args(), {"--outlier-sites", "down_in,q"})), {"--outlier-sites", "'q'"});
  expect_error(run(with(base_args(), {"--outlier-sites", "out,down_in"})), {"--outlier-sites", "down_in,out"});
  expect_error(run({"analyze", "-m", stories(), "--data", wikitext(), "--samples", "0"}), {"--samples"});
  expect_error(run({"analyze", "-m", stories(), "--data", wikitext(), "--len", "100000"}),
               {"--len", "max_position_embeddings"});
  expect_error(run({"analyze", "-m", stories(), "--data", "/nonexistent/data.txt"}), {"/nonexistent/data.txt"});

  testing::TempDir d;
  std::ofstream(d.file("keep.txt")) << "x";
  expect_error(run(with(base_args(), {"--out", d.path()})), {"--out", "not empty"});
  EXPECT_EQ(read_file(d.file("keep.txt")), "x");
  EXPECT_EQ(std::distance(fs::directory_iterator(d.path()), fs::directory_iterator()), 1);
  expect_error(run(with(base_args(), {"--out", d.file("keep.txt")})), {"--out", "not a directory"});
}

}  // namespace
}  // namespace sinkq
