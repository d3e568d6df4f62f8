// The KV prefix on the command line: `sinkq ppl --prefix SPEC [--prefix-source fp|quant]` (protocol
// prefix by default, printed; JSON reports the tokens and how they were found), the prefixquant-*
// presets, `sinkq generate --prefix`, `sinkq ladder`, and the errors naming their flags.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "cli/cli_run.h"
#include "util/testutil.h"

namespace sinkq {
namespace {

using clitest::expect_error;
using clitest::run;
using clitest::RunResult;
using nlohmann::json;

std::string stories() { return testing::shared_dir() + "/models/stories260K"; }
std::string mixtext() { return testing::shared_dir() + "/models/mixtext-2.5M"; }
std::string sample_text() { return testing::shared_dir() + "/golden/stories260K/tinystories_sample.txt"; }

// ppl on stories260K, one window of 128, plus `extra`.
RunResult ppl(std::vector<std::string> extra) {
  std::vector<std::string> a{"ppl", "-m", stories(), "-f", sample_text(), "--ctx", "128", "--max-windows", "2"};
  a.insert(a.end(), extra.begin(), extra.end());
  return run(a);
}

json ppl_json(std::vector<std::string> extra) {
  extra.push_back("--json");
  const RunResult r = ppl(extra);
  EXPECT_EQ(r.rc, 0) << r.err;
  return r.rc == 0 ? json::parse(r.out) : json();
}

TEST(CliPrefix, PplBosPrefixDefaultsToThePrefixProtocolAndReportsTheTokens) {
  const json j = ppl_json({"--prefix", "bos", "--kld"});
  EXPECT_EQ(j.at("protocol"), "prefix");
  EXPECT_EQ(j.at("prefix").at("tokens"), json::array({1}));
  EXPECT_EQ(j.at("prefix").at("texts"), json::array({"<s>"}));
  EXPECT_EQ(j.at("prefix").at("source"), "fp");
  EXPECT_EQ(j.at("config").at("prefix").at("spec"), "bos");
  EXPECT_EQ(j.at("tokens_scored"), 2 * 127);  // ctx − 1 per window, the prefix never scored
  // Nothing quantized: the evaluated and the reference forward run the same model behind the same
  // fp prefix, computed the same way: the logits are bit-equal, so KL is exactly 0.
  EXPECT_EQ(j.at("kld").get<double>(), 0.0);
  // Text output prints the protocol and the prefix.
  const RunResult t = ppl({"--prefix", "bos"});
  ASSERT_EQ(t.rc, 0) << t.err;
  EXPECT_NE(t.out.find("protocol prefix (default with a prefix)"), std::string::npos) << t.out;
  EXPECT_NE(t.out.find("prefix bos (1 tokens: 1 \"<s>\""), std::string::npos) << t.out;
  // Without a prefix nothing changes: gptq, prefix null.
  const json g = ppl_json({});
  EXPECT_EQ(g.at("protocol"), "gptq");
  EXPECT_TRUE(g.at("prefix").is_null());
}

// IntactKV on/off: with nothing quantized, the quantized model's own prefix rows are the fp rows
// (equal ppl, exactly: the same computation); with W4A4KV4 they differ, and the fp prefix is better
// or equal is not asserted (one tiny model, 2 windows) — only that the source changes the result.
TEST(CliPrefix, PrefixSourceQuantIsTheIntactKvOffBaseline) {
  const double fp = ppl_json({"--prefix", "bos"}).at("ppl");
  const double q = ppl_json({"--prefix", "bos", "--prefix-source", "quant"}).at("ppl");
  EXPECT_EQ(fp, q);
  const json a = ppl_json({"--preset", "w4a4kv4", "--prefix", "bos"});
  const json b = ppl_json({"--preset", "w4a4kv4", "--prefix", "bos", "--prefix-source", "quant"});
  EXPECT_NE(a.at("ppl").get<double>(), b.at("ppl").get<double>());
  EXPECT_EQ(b.at("config").at("prefix").at("source"), "quant");
  EXPECT_EQ(b.at("tokens_scored"), a.at("tokens_scored"));  // the same targets
}

TEST(CliPrefix, PrefixQuantPresetFindsThePrefixAndCalibratesBehindIt) {
  const json j = ppl_json({"--preset", "prefixquant-w4a8kv4", "--calib", sample_text(), "--calib-samples", "2",
                           "--calib-len", "48"});
  EXPECT_EQ(j.at("protocol"), "prefix");
  const json& p = j.at("prefix");
  EXPECT_EQ(p.at("spec"), "auto");
  EXPECT_TRUE(p.at("found").contains("o"));
  EXPECT_TRUE(p.at("found").contains("counts"));
  EXPECT_EQ(p.at("tokens").back(), 1);  // [BOS] last (calib/prefix.h)
  const json& c = j.at("config");
  EXPECT_EQ(c.at("preset"), "prefixquant-w4a8kv4");
  EXPECT_EQ(c.at("rotation").at("on"), true);
  EXPECT_EQ(c.at("activations").at("mode"), "static");
  EXPECT_EQ(c.at("kv").at("granularity"), "per_head");
  EXPECT_EQ(c.at("calibration").at("data").at("body_drops_leading_bos"), true);
  EXPECT_EQ(c.at("calibration_result").at("behind_prefix"), "fp prefix KV");
  // --prefix none turns the preset's prefix off (and the protocol back to gptq).
  const json n = ppl_json({"--preset", "prefixquant-w4a8kv4", "--prefix", "none", "--calib", sample_text(),
                           "--calib-samples", "2", "--calib-len", "48"});
  EXPECT_EQ(n.at("protocol"), "gptq");
  EXPECT_TRUE(n.at("config").at("prefix").is_null());
}

// mixtext-2.5M has 256 positions: --ctx 256 behind a 1-token prefix does not fit; 255 does.
TEST(CliPrefix, ContextPlusPrefixMustFitMaxPositions) {
  const std::string wiki = testing::shared_dir() + "/data/wikitext-2/wikitext2_test_joined.txt";
  expect_error(run({"ppl", "-m", mixtext(), "-f", wiki, "--ctx", "256", "--max-windows", "1", "--prefix", "bos"}),
               {"--ctx 256", "--prefix bos", "255"});
  const RunResult ok = run({"ppl", "-m", mixtext(), "-f", wiki, "--ctx", "255", "--max-windows", "1", "--prefix", "bos"});
  EXPECT_EQ(ok.rc, 0) << ok.err;
}

// Behind a prefix, default-length calibration samples are cut to fit the positions: mixtext has
// 256; a 2-token prefix holding [BOS] leaves 254 body tokens + the dropped [BOS] = 255 per sample.
// A --calib-len that does not fit is an error naming it and the largest length that does.
TEST(CliPrefix, CalibrationSamplesFitBehindThePrefix) {
  const std::string wiki = testing::shared_dir() + "/data/wikitext-2/wikitext2_test_joined.txt";
  const std::string c4 = testing::shared_dir() + "/data/c4/c4_train_00000_first1000.jsonl";
  const std::vector<std::string> a{"ppl", "-m", mixtext(), "-f", wiki, "--ctx", "128", "--max-windows", "1",
                                   "--prefix", "ids:13,1", "--a-bits", "8", "--a-quant", "static", "--a-clip", "1",
                                   "--calib", c4, "--calib-samples", "1"};
  std::vector<std::string> j = a;
  j.push_back("--json");
  const RunResult r = run(j);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.err.find("cut to 255 tokens"), std::string::npos) << r.err;
  const json out = json::parse(r.out);
  EXPECT_EQ(out.at("config").at("calibration").at("len"), 255);
  EXPECT_EQ(out.at("config").at("calibration_result").at("tokens"), 254);  // the body only
  std::vector<std::string> bad = a;
  bad.insert(bad.end(), {"--calib-len", "256"});
  expect_error(run(bad), {"--calib-len", "--prefix ids:13,1", "255"});
}

TEST(CliPrefix, PplErrorsNameTheFlags) {
  expect_error(ppl({"--protocol", "prefix"}), {"--protocol prefix", "--prefix"});
  expect_error(ppl({"--protocol", "gptq", "--prefix", "bos"}), {"--protocol gptq", "--prefix bos"});
  expect_error(ppl({"--protocol", "bos", "--prefix", "bos"}), {"--protocol bos", "--prefix"});
  expect_error(ppl({"--protocol", "window"}), {"--protocol", "window"});
  expect_error(ppl({"--prefix-source", "quant"}), {"--prefix-source", "--prefix"});
  expect_error(ppl({"--prefix", "bos", "--prefix-source", "int4"}), {"--prefix-source", "int4"});
  expect_error(ppl({"--prefix", "ids:1,x"}), {"--prefix", "x"});
  expect_error(ppl({"--prefix", "ids:99999"}), {"--prefix", "99999"});
  expect_error(ppl({"--prefix", "auto"}), {"--prefix auto", "--calib"});
  expect_error(ppl({"--prefix", "bos", "--prefix-eta", "10"}), {"--prefix-eta", "auto"});
  expect_error(ppl({"--prefix", "system:be brief"}), {"chat_template", "--prefix text:"});
  expect_error(ppl({"--preset", "prefixquant-w4a4kv4"}), {"--calib"});
}

// generate behind a [BOS] prefix: the prompt is encoded without BOS; greedy decoding equals the
// plain run (BOS inline). Exact equality of 8 greedy ids: the prefix path differs from the inline
// one only in fp32 summation order (kernels/ops.h), far below the logit gaps of greedy picks here.
TEST(CliPrefix, GenerateBehindABosPrefix) {
  const std::vector<std::string> base{"generate", "-m", stories(), "-p", "Once upon a time", "-n", "8", "--temp", "0",
                                      "--json"};
  std::vector<std::string> with = base;
  with.insert(with.end(), {"--prefix", "bos"});
  const RunResult a = run(base), b = run(with);
  ASSERT_EQ(a.rc, 0) << a.err;
  ASSERT_EQ(b.rc, 0) << b.err;
  const json ja = json::parse(a.out), jb = json::parse(b.out);
  EXPECT_EQ(ja.at("prompt_ids")[0], 1);
  EXPECT_NE(jb.at("prompt_ids")[0], 1);
  EXPECT_EQ(jb.at("prompt_ids").size() + 1, ja.at("prompt_ids").size());
  EXPECT_EQ(jb.at("prefix").at("tokens"), json::array({1}));
  EXPECT_EQ(ja.at("generated_ids"), jb.at("generated_ids"));
  // Quantization flags work on generate too.
  std::vector<std::string> q = with;
  q.insert(q.end(), {"--preset", "w8a8kv8"});
  const RunResult c = run(q);
  ASSERT_EQ(c.rc, 0) << c.err;
  EXPECT_EQ(json::parse(c.out).at("config").at("preset"), "w8a8kv8");
  // Too long for the positions behind the prefix.
  expect_error(run({"generate", "-m", mixtext(), "-p", "The", "-n", "255", "--prefix", "bos"}), {"--prefix bos", "256"});
}

TEST(CliPrefix, LadderRowsShareTargetsAndReference) {
  const RunResult r = run({"ladder", "-m", stories(), "-f", sample_text(), "--calib", sample_text(), "--bits", "w4a8kv4",
                           "--ctx", "64", "--max-windows", "2", "--calib-samples", "2", "--calib-len", "32", "--tables",
                           "table6,intactkv", "--intactkv-prompt", "text:Once upon a time", "--json"});
  ASSERT_EQ(r.rc, 0) << r.err;
  const json j = json::parse(r.out);
  EXPECT_EQ(j.at("protocol"), "prefix");
  const json& rows = j.at("rows");
  ASSERT_EQ(rows.size(), 1u + 5u + 13u);  // fp, Table 6 (5), IntactKV (fp behind [P]; 3 settings x 4)
  EXPECT_EQ(rows[0].at("kld").get<double>(), 0.0);  // fp behind an fp [BOS] is the reference itself
  EXPECT_EQ(rows[0].at("delta_nll_vs_fp").get<double>(), 0.0);
  EXPECT_EQ(rows[6].at("name"), "full precision behind [P]");
  EXPECT_EQ(rows[6].at("kld").get<double>(), 0.0);  // the reference of the rows behind [P]
  for (const auto& row : rows) {
    EXPECT_EQ(row.at("tokens_scored"), rows[0].at("tokens_scored")) << row.at("name");
    const bool behind_prompt = row.at("delta_reference") == "full precision behind [P]";
    EXPECT_EQ(behind_prompt, row.at("name").get<std::string>().find("[P]") != std::string::npos) << row.at("name");
    const auto& ref_nll = behind_prompt ? rows[6].at("window_nll") : rows[0].at("window_nll");
    const auto fp_nll = ref_nll.get<std::vector<double>>();
    EXPECT_GT(row.at("ppl").get<double>(), 1.0) << row.at("name");
    // The reported difference is the mean of the per-window differences to its fp row, and its
    // standard error that of those differences (2 windows: |d0 - d1| / 2).
    const auto nll = row.at("window_nll").get<std::vector<double>>();
    ASSERT_EQ(nll.size(), 2u) << row.at("name");
    const double d0 = nll[0] - fp_nll[0], d1 = nll[1] - fp_nll[1];
    EXPECT_NEAR(row.at("delta_nll_vs_fp").get<double>(), (d0 + d1) / 2, 1e-12) << row.at("name");
    EXPECT_NEAR(row.at("delta_nll_se").get<double>(), std::abs(d0 - d1) / 2, 1e-12) << row.at("name");
  }
  EXPECT_EQ(rows[1].at("name"), "RTN, dynamic per-token");
  EXPECT_EQ(rows[5].at("name"), "+ prefixed outliers");
  EXPECT_EQ(rows[5].at("config").at("prefix").at("source"), "fp");
  EXPECT_EQ(rows[4].at("config").at("prefix").at("source"), "quant");  // + static: [BOS] inline
  EXPECT_EQ(rows[4].at("config").at("activations").at("mode"), "static");
  EXPECT_EQ(rows[8].at("name"), "W3 g128 RTN + IntactKV[B]");
  EXPECT_EQ(rows[7].at("config").at("prefix").at("source"), "quant");
  EXPECT_EQ(rows[8].at("config").at("prefix").at("source"), "fp");
  // Behind [P] / IntactKV[P]: the prompt's tokens from the quantized / fp model, for each setting.
  const auto prompt = j.at("prefix").at("intactkv_prompt").at("tokens");
  EXPECT_GT(prompt.size(), 1u);
  for (size_t i : {9u, 13u, 17u}) {
    EXPECT_NE(rows[i].at("name").get<std::string>().find("behind [P]"), std::string::npos) << rows[i].at("name");
    EXPECT_EQ(rows[i].at("config").at("prefix").at("source"), "quant");
    EXPECT_EQ(rows[i].at("config").at("prefix").at("tokens"), prompt);
    EXPECT_NE(rows[i + 1].at("name").get<std::string>().find("IntactKV[P]"), std::string::npos) << rows[i + 1].at("name");
    EXPECT_EQ(rows[i + 1].at("config").at("prefix").at("source"), "fp");
    EXPECT_EQ(rows[i + 1].at("config").at("prefix").at("tokens"), prompt);
  }
  EXPECT_EQ(rows[15].at("name"), "W4A8KV4 + rotation");  // the --bits setting, dynamic
  EXPECT_EQ(rows[15].at("config").at("kv").at("bits"), 4);
  EXPECT_NE(r.err.find("ladder: [19/19]"), std::string::npos) << r.err;  // progress on stderr
  expect_error(run({"ladder", "-m", stories(), "-f", sample_text(), "--calib", sample_text(), "--intactkv-prompt", "auto"}),
               {"--intactkv-prompt", "auto"});
  expect_error(run({"ladder", "-m", stories(), "-f", sample_text(), "--calib", sample_text(), "--bits", "w2a2"}), {"--bits", "w2a2"});
  expect_error(run({"ladder", "-m", stories(), "-f", sample_text(), "--calib", sample_text(), "--tables", "table9"}),
               {"--tables", "table9"});
}

// The calibration cost flags reach every calibrated row's recipe (and bad values name the flag
// before anything runs).
TEST(CliPrefix, LadderPassesTheSearchCostFlags) {
  const RunResult r = run({"ladder", "-m", stories(), "-f", sample_text(), "--calib", sample_text(), "--bits", "w4a8kv4",
                           "--ctx", "64", "--max-windows", "1", "--calib-samples", "2", "--calib-len", "32", "--tables",
                           "table6", "--calib-grid", "1,0.8", "--calib-search-samples", "1", "--calib-refine", "2", "--json"});
  ASSERT_EQ(r.rc, 0) << r.err;
  const json rows = json::parse(r.out).at("rows");
  int calibrated = 0;
  for (const auto& row : rows) {
    const json& c = row.at("config").at("calibration");
    if (c.is_null()) continue;
    ++calibrated;
    EXPECT_EQ(c.at("grid").size(), 2u) << row.at("name");
    EXPECT_EQ(c.at("search_samples"), 1) << row.at("name");
    EXPECT_EQ(c.at("refine").at("steps"), 2) << row.at("name");
  }
  EXPECT_GE(calibrated, 2);  // + grid search, + static, + prefixed outliers
  const std::vector<std::string> base = {"ladder", "-m", stories(), "-f", sample_text(), "--calib", sample_text()};
  auto with = [&](std::initializer_list<std::string> more) {
    std::vector<std::string> a = base;
    a.insert(a.end(), more);
    return run(a);
  };
  expect_error(with({"--calib-grid", "1,2"}), {"--calib-grid", "outside (0, 1]"});
  expect_error(with({"--calib-search-samples", "-1"}), {"--calib-search-samples"});
  expect_error(with({"--calib-refine", "65"}), {"--calib-refine"});
}

}  // namespace
}  // namespace sinkq
