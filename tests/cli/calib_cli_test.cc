// `sinkq ppl` with calibration (--w-clip grid, --a-quant static, --kv-quant static, --rotate,
// --calib*): the JSON and text state the exact configuration and calibration, and bad flags give
// exit 1 with an error naming the flag (before any model is loaded where possible).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <sys/wait.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/mmap.h"
#include "cli/cli_run.h"
#include "util/testutil.h"

namespace sinkq {
namespace {

using nlohmann::json;

using clitest::expect_error;
using clitest::run;
using clitest::RunResult;

std::string stories() { return testing::shared_dir() + "/models/stories260K"; }
std::string sample_text() { return testing::shared_dir() + "/golden/stories260K/tinystories_sample.txt"; }

// ppl on stories260K, one window of 256, plus `extra`.
RunResult ppl(std::vector<std::string> extra) {
  std::vector<std::string> a{"ppl", "-m", stories(), "-f", sample_text(), "--ctx", "256", "--max-windows", "1"};
  a.insert(a.end(), extra.begin(), extra.end());
  return run(a);
}

TEST(CliCalib, StaticW4A4KV4JsonStatesConfigAndCalibration) {
  const RunResult r = ppl({"--preset", "w4a4kv4", "--w-clip", "grid", "--a-quant", "static", "--kv-quant", "static",
                           "--kv-gran", "tensor", "--calib", sample_text(), "--calib-samples", "2", "--calib-len", "64",
                           "--calib-seed", "3", "--json"});
  ASSERT_EQ(r.rc, 0) << r.err;
  const json j = json::parse(r.out);
  const json& c = j.at("config");
  EXPECT_EQ(c.at("weights").at("clip_ratio"), "grid");
  EXPECT_EQ(c.at("activations").at("mode"), "static");
  EXPECT_EQ(c.at("activations").at("granularity"), "per_tensor");
  EXPECT_EQ(c.at("activations").at("clip_ratio"), "grid");
  EXPECT_EQ(c.at("kv").at("mode"), "static");
  EXPECT_EQ(c.at("kv").at("granularity"), "per_tensor");
  EXPECT_EQ(c.at("rotation").at("on"), false);
  const json& cal = c.at("calibration");
  EXPECT_EQ(cal.at("file"), sample_text());
  EXPECT_EQ(cal.at("samples"), 2);
  EXPECT_EQ(cal.at("len"), 64);
  EXPECT_EQ(cal.at("seed"), 3);
  EXPECT_EQ(cal.at("grid").size(), 21u);
  EXPECT_EQ(cal.at("grid")[0], 1.0);
  EXPECT_EQ(cal.at("grid")[20], 0.5);
  EXPECT_EQ(cal.at("data").at("format"), "text");
  EXPECT_EQ(cal.at("data").at("samples"), 2);
  const json& res = c.at("calibration_result");
  EXPECT_EQ(res.at("tokens"), 128);
  EXPECT_TRUE(res.at("weights").contains("ratio_histogram"));
  for (const char* s : {"attn_in", "o_in", "mlp_in", "down_in"}) EXPECT_EQ(res.at("activations").at(s).at("ratio").size(), 5u) << s;
  for (const char* s : {"k", "v"}) EXPECT_EQ(res.at("kv").at(s).at("ratio").size(), 5u) << s;
  EXPECT_GT(j.at("ppl").get<double>(), 1.0);
  // Calibration progress went to stderr, per layer.
  EXPECT_NE(r.err.find("static scale search, layer"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("weight clip search, layer"), std::string::npos) << r.err;
}

TEST(CliCalib, TextOutputStatesConfigAndCalibration) {
  const RunResult r = ppl({"--a-bits", "8", "--a-quant", "static", "--a-clip", "1", "--rotate", "--rotate-seed", "7",
                           "--calib", sample_text(), "--calib-samples", "2", "--calib-len", "32"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("A8 static per-tensor sym clip=1"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("rotate seed=7"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("calibration " + sample_text()), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("2 samples x 32 tokens"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("attn_in clip 1"), std::string::npos) << r.out;
}

TEST(CliCalib, RotationOnlyIsTheFullPrecisionModel) {
  const RunResult a = ppl({"--json"});
  const RunResult b = ppl({"--rotate", "--json"});
  ASSERT_EQ(a.rc, 0) << a.err;
  ASSERT_EQ(b.rc, 0) << b.err;
  const double pa = json::parse(a.out).at("ppl"), pb = json::parse(b.out).at("ppl");
  EXPECT_NEAR(pb, pa, 1e-4 * pa);
  EXPECT_EQ(json::parse(b.out).at("config").at("rotation").at("on"), true);
  EXPECT_TRUE(json::parse(b.out).at("config").at("calibration").is_null());
}

// `sinkq calib ids` writes the samples the sampling flags draw; calibrating on that file is the
// same calibration (the same tokens through the same engine: the same ppl to the last digit), and
// the statistic of the static ranges is in the JSON (sample_mean by default, max when asked, which
// calibrates differently on more than one sample).
TEST(CliCalib, IdsFileReproducesTheSamplingAndStatisticIsStated) {
  testing::TempDir d;
  const std::vector<std::string> draw = {"--calib", sample_text(), "--calib-samples", "3", "--calib-len", "48",
                                         "--calib-seed", "5"};
  std::vector<std::string> a = {"calib", "ids", "-m", stories(), "-o", d.file("ids.jsonl"), "--json"};
  a.insert(a.end(), draw.begin(), draw.end());
  const RunResult w = run(a);
  ASSERT_EQ(w.rc, 0) << w.err;
  EXPECT_EQ(json::parse(w.out).at("samples"), 3);
  const std::string ids = read_file(d.file("ids.jsonl"));
  EXPECT_EQ(std::count(ids.begin(), ids.end(), '\n'), 3);
  expect_error(run(a), {"ids.jsonl", "--force"});  // never overwritten silently

  const std::vector<std::string> q = {"--preset", "w4a4kv4", "--a-quant", "static", "--kv-quant", "static",
                                      "--a-clip", "1", "--kv-clip", "1", "--json"};
  std::vector<std::string> f1 = q, f2 = q, f3 = q;
  f1.insert(f1.end(), draw.begin(), draw.end());
  for (auto* f : {&f2, &f3}) f->insert(f->end(), {"--calib", d.file("ids.jsonl"), "--calib-samples", "3", "--calib-len", "48"});
  f3.insert(f3.end(), {"--calib-stat", "max"});
  const RunResult r1 = ppl(f1), r2 = ppl(f2), r3 = ppl(f3);
  ASSERT_EQ(r1.rc, 0) << r1.err;
  ASSERT_EQ(r2.rc, 0) << r2.err;
  ASSERT_EQ(r3.rc, 0) << r3.err;
  const json j1 = json::parse(r1.out), j2 = json::parse(r2.out), j3 = json::parse(r3.out);
  EXPECT_EQ(j1.at("ppl"), j2.at("ppl"));
  EXPECT_EQ(j2.at("config").at("calibration").at("data").at("format"), "ids");
  EXPECT_EQ(j1.at("config").at("calibration").at("statistic"), "sample_mean");
  EXPECT_EQ(j3.at("config").at("calibration").at("statistic"), "max");
  EXPECT_NE(j3.at("ppl"), j2.at("ppl"));
  expect_error(ppl({"--a-bits", "4", "--a-quant", "static", "--calib", sample_text(), "--calib-stat", "median"}),
               {"--calib-stat", "median"});
}

TEST(CliCalib, Errors) {
  // Calibration needed, no data: fails before loading the model, naming what needs it.
  expect_error(ppl({"--preset", "w8a8", "--a-quant", "static"}), {"--a-quant static", "--calib"});
  expect_error(ppl({"--w-bits", "4", "--w-clip", "grid"}), {"--w-clip grid", "--calib"});
  expect_error(ppl({"--kv-bits", "4", "--kv-quant", "static"}), {"--kv-quant static", "--calib"});
  // Bad values name the flag.
  expect_error(ppl({"--w-bits", "4", "--w-clip", "lots"}), {"--w-clip", "lots"});
  expect_error(ppl({"--kv-bits", "4", "--kv-quant", "frozen"}), {"--kv-quant", "frozen"});
  expect_error(ppl({"--kv-bits", "4", "--kv-gran", "tensor"}), {"--kv-gran", "--kv-quant static"});
  expect_error(ppl({"--kv-bits", "4", "--kv-quant", "static", "--kv-gran", "token", "--calib", sample_text()}), {"--kv-gran"});
  expect_error(ppl({"--a-bits", "4", "--a-clip", "0.9"}), {"--a-clip", "static"});
  expect_error(ppl({"--kv-bits", "4", "--kv-clip", "grid"}), {"--kv-clip", "static"});
  expect_error(ppl({"--a-bits", "4", "--a-quant", "static", "--a-clip", "2", "--calib", sample_text()}), {"--a-clip"});
  expect_error(ppl({"--a-bits", "4", "--a-quant", "cross", "--a-asym"}), {"--a-asym"});
  expect_error(ppl({"--rotate-seed", "3"}), {"--rotate-seed", "--rotate"});
  expect_error(ppl({"--a-bits", "4", "--a-quant", "static", "--calib", sample_text(), "--calib-samples", "0"}),
               {"--calib-samples"});
  expect_error(ppl({"--a-bits", "4", "--a-quant", "static", "--calib", sample_text(), "--calib-len", "100000"}),
               {"--calib-len"});
  // The search's cost flags.
  const std::vector<std::string> st = {"--a-bits", "4", "--a-quant", "static", "--calib", sample_text()};
  auto with = [&](std::initializer_list<std::string> more) {
    std::vector<std::string> a = st;
    a.insert(a.end(), more);
    return ppl(a);
  };
  expect_error(with({"--calib-grid", "1,0.9,,0.8"}), {"--calib-grid", "empty item"});
  expect_error(with({"--calib-grid", "1,1.2"}), {"--calib-grid", "1.2", "outside (0, 1]"});
  expect_error(with({"--calib-grid", "0,0.5"}), {"--calib-grid", "outside (0, 1]"});
  expect_error(with({"--calib-grid", "0.9,x"}), {"--calib-grid", "'x' is not a number"});
  expect_error(with({"--calib-search-samples", "-2"}), {"--calib-search-samples"});
  expect_error(with({"--calib-refine", "100"}), {"--calib-refine"});
  // A missing calibration file is named.
  expect_error(ppl({"--a-bits", "4", "--a-quant", "static", "--calib", "/nonexistent/c4.jsonl"}), {"c4.jsonl"});
}

// The cost flags reach the recipe the run prints: the grid, the scored samples, the refinement.
TEST(CliCalib, SearchCostFlagsAreInTheConfiguration) {
  const RunResult r = ppl({"--preset", "w4a4kv4", "--a-quant", "static", "--calib", sample_text(), "--calib-samples",
                           "2", "--calib-len", "32", "--calib-grid", "0.95, 0.75", "--calib-search-samples", "1",
                           "--calib-refine", "4", "--json"});
  ASSERT_EQ(r.rc, 0) << r.err;
  const json c = json::parse(r.out).at("config").at("calibration");
  EXPECT_EQ(c.at("grid").size(), 2u);
  EXPECT_EQ(c.at("search_samples"), 1);
  EXPECT_EQ(c.at("refine").at("steps"), 4);
}

}  // namespace
}  // namespace sinkq
