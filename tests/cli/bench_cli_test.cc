// sinkq bench --quant: the side-by-side quantized benchmark runs on a tiny random model, its JSON
// carries every field per configuration (speed, bandwidth, memory, per-op profile), and bad
// configuration names are errors naming the flag. No timing is asserted: speed is never a test.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "cli/cli_run.h"

namespace sinkq {
namespace {

using clitest::expect_error;
using clitest::run;
using clitest::RunResult;
using nlohmann::json;

const std::vector<std::string> kFast = {"bench", "--random", "tiny", "--prefill", "16", "--decode", "4",
                                        "--reps", "1", "--no-hook-probe", "--threads", "1",
                                        "--bw-probe-mib", "16"};

std::vector<std::string> with(std::vector<std::string> args, const std::vector<std::string>& more) {
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

TEST(BenchCli, QuantJsonHasEveryField) {
  const RunResult r = run(with(kFast, {"--quant", "fp32,w4a8,w8a8-static", "--json"}));
  ASSERT_EQ(r.rc, 0) << r.err;
  const json j = json::parse(r.out);
  ASSERT_TRUE(j.contains("configs"));
  const json& cs = j.at("configs");
  ASSERT_EQ(cs.size(), 3u);
  EXPECT_EQ(cs[0].at("name"), "fp32");
  EXPECT_EQ(cs[1].at("name"), "w4a8");
  EXPECT_EQ(cs[2].at("name"), "w8a8-static");
  EXPECT_NE(cs[1].at("config").get<std::string>().find("A8 dynamic per-token"), std::string::npos) << cs[1];
  EXPECT_NE(cs[2].at("config").get<std::string>().find("static per-tensor"), std::string::npos) << cs[2];
  for (const json& c : cs) {
    for (const char* k : {"prefill_tokens_per_s", "decode_tokens_per_s", "decode_ms_per_token", "prefill_ratio_to_fp32",
                          "decode_ratio_to_fp32", "decode_weight_bytes", "decode_achieved_gbs",
                          "decode_bandwidth_fraction", "model_bytes", "peak_rss_bytes", "pack_seconds", "profile"})
      EXPECT_TRUE(c.contains(k)) << "config " << c.at("name") << " lacks " << k;
    EXPECT_GT(c.at("prefill_tokens_per_s").get<double>(), 0.0);
    EXPECT_GT(c.at("decode_tokens_per_s").get<double>(), 0.0);
    EXPECT_GT(c.at("model_bytes").get<int64_t>(), 0);
    EXPECT_GT(c.at("peak_rss_bytes").get<int64_t>(), 0);
    const json& p = c.at("profile");
    for (const char* phase : {"prefill_ms", "decode_ms"})
      for (const char* op : {"norms", "qkv", "rope", "attention", "o_proj", "gate_up", "silu", "down", "lm_head"}) {
        ASSERT_TRUE(p.at(phase).contains(op)) << phase << " lacks " << op;
        EXPECT_GE(p.at(phase).at(op).get<double>(), 0.0) << phase << " " << op;
      }
    EXPECT_GT(p.at("prefill_step_ms").get<double>(), 0.0);
  }
  EXPECT_DOUBLE_EQ(cs[0].at("prefill_ratio_to_fp32").get<double>(), 1.0);
  // Packed weights are smaller than the fp model's bf16 ones (int4 codes: about a quarter).
  EXPECT_LT(cs[1].at("decode_weight_bytes").get<int64_t>(), cs[0].at("decode_weight_bytes").get<int64_t>());
  EXPECT_EQ(cs[0].at("profile").at("act_quant_est_prefill_ms").get<double>(), 0.0);  // nothing to quantize
  EXPECT_GT(j.at("measured_read_gbs").get<double>(), 0.0);
}

// fp32 is the reference of every ratio: added when missing, always first.
TEST(BenchCli, Fp32AlwaysRunsFirst) {
  const RunResult r = run(with(kFast, {"--quant", "w4a4,fp32", "--no-profile", "--json"}));
  ASSERT_EQ(r.rc, 0) << r.err;
  const json cs = json::parse(r.out).at("configs");
  ASSERT_EQ(cs.size(), 2u);
  EXPECT_EQ(cs[0].at("name"), "fp32");
  EXPECT_EQ(cs[1].at("name"), "w4a4");
  EXPECT_FALSE(cs[1].contains("profile"));

  const RunResult r2 = run(with(kFast, {"--quant", "w8a8", "--no-profile", "--json"}));
  ASSERT_EQ(r2.rc, 0) << r2.err;
  const json cs2 = json::parse(r2.out).at("configs");
  ASSERT_EQ(cs2.size(), 2u);
  EXPECT_EQ(cs2[0].at("name"), "fp32");
}

TEST(BenchCli, TextTableAndProfile) {
  const RunResult r = run(with(kFast, {"--quant", "fp32,w4a8"}));
  ASSERT_EQ(r.rc, 0) << r.err;
  for (const char* s : {"x fp32", "per-op profile, prefill", "per-op profile, decode", "attn_in quant + q/k/v",
                        "lm_head", "w4a8"})
    EXPECT_NE(r.out.find(s), std::string::npos) << "stdout lacks '" << s << "': " << r.out;
  EXPECT_NE(r.err.find("bench: w4a8: packing"), std::string::npos) << r.err;  // progress on stderr
}

TEST(BenchCli, BadQuantNamesTheFlag) {
  expect_error(run(with(kFast, {"--quant", "w3a8"})), {"--quant", "w3a8"});
  expect_error(run(with(kFast, {"--quant", "fp32,,w4a8"})), {"--quant", "empty"});
  expect_error(run(with(kFast, {"--quant", "w4a8,w4a8"})), {"--quant", "twice"});
  // Parsed, but the kernels cannot run it: int8 weights are per output channel only.
  expect_error(run(with(kFast, {"--quant", "w8a8-g128"})), {"--quant w8a8-g128", "int8 weights"});
  expect_error(run(with(kFast, {"--quant", "fp32,w4a8", "--fp-dtype", "f8"})), {"--fp-dtype", "f8"});
}

// kv8 / kv4: the packed KV cache in the timed Forward. A cached token then costs, per layer, K and
// V codes (kv_dim bytes at int8, half at int4) plus one fp32 scale per KV head each — `--random
// tiny`: 2 layers, kv_dim 32, 2 KV heads; fp32: 2·2·32·4 = 512 bytes.
TEST(BenchCli, PackedKvConfigs) {
  const RunResult r = run(with(kFast, {"--quant", "fp32,w4a8kv8,w4a8kv4", "--no-profile", "--json"}));
  ASSERT_EQ(r.rc, 0) << r.err;
  const json cs = json::parse(r.out).at("configs");
  ASSERT_EQ(cs.size(), 3u);
  EXPECT_EQ(cs[0].at("kv_bytes_per_token").get<double>(), 2 * 2 * 32 * 4);
  EXPECT_EQ(cs[1].at("kv_bytes_per_token").get<double>(), 2 * 2 * (32 + 2 * 4));
  EXPECT_EQ(cs[2].at("kv_bytes_per_token").get<double>(), 2 * 2 * (16 + 2 * 4));
  EXPECT_NE(cs[2].at("config").get<std::string>().find("KV4 dynamic per-head"), std::string::npos) << cs[2];
  expect_error(run(with(kFast, {"--quant", "w4a8kv3"})), {"--quant", "w4a8kv3"});
}

// --fp-dtype: the packed configs' lm_head as the artifact stores it; auto keeps the bf16 source,
// f32 widens it, and a decode step then reads exactly vocab × hidden × 2 more bytes (256 × 64 × 2).
TEST(BenchCli, FpDtypeOfThePackedLmHead) {
  auto w4a8 = [](const std::string& fp) {
    const RunResult r = run(with(kFast, {"--quant", "fp32,w4a8", "--no-profile", "--json", "--fp-dtype", fp}));
    EXPECT_EQ(r.rc, 0) << r.err;
    return r.rc == 0 ? json::parse(r.out).at("configs").at(1) : json::object();
  };
  const json a = w4a8("auto"), f = w4a8("f32");
  ASSERT_TRUE(a.contains("config") && f.contains("config"));
  EXPECT_NE(a.at("config").get<std::string>().find("lm_head BF16"), std::string::npos) << a.at("config");
  EXPECT_NE(f.at("config").get<std::string>().find("lm_head F32"), std::string::npos) << f.at("config");
  EXPECT_EQ(f.at("decode_weight_bytes").get<int64_t>() - a.at("decode_weight_bytes").get<int64_t>(), 256 * 64 * 2);
}

}  // namespace
}  // namespace sinkq

namespace sinkq {
namespace {

// bench --kv-only: every storage runs (or is sized) at a tiny shape, its JSON has the fields, a
// cache that cannot fit is reported with its figure and skipped, bad flags name the flag.
TEST(BenchCli, KvOnly) {
  const std::vector<std::string> base = {"bench", "--kv-only", "--random", "tiny", "--reps", "1", "--threads", "1",
                                         "--bw-probe-mib", "16"};
  const RunResult r = clitest::run(with(base, {"--ctx", "64,300", "--kv", "fp32,fp16,int8,int4,nuq4,nuq3-1pct,nuq2-1pct", "--json"}));
  ASSERT_EQ(r.rc, 0) << r.err;
  const json j = json::parse(r.out);
  const json& rs = j.at("results");
  ASSERT_EQ(rs.size(), 14u);
  for (const json& e : rs) {
    const std::string s = e.at("storage");
    EXPECT_EQ(e.at("timed").get<bool>(), s != "fp16") << e;
    EXPECT_GT(e.at("bytes_per_token").get<double>(), 0) << e;
    if (s != "fp16") {
      EXPECT_GT(e.at("ms_per_token").get<double>(), 0) << e;
    }
  }
  // Bytes per token shrink with the storage: fp32 > fp16 > int8 > nuq4 > nuq2-1%.
  auto bpt = [&](const std::string& s) {
    for (const json& e : rs)
      if (e.at("storage") == s && e.at("ctx") == 300) return e.at("bytes_per_token").get<double>();
    return 0.0;
  };
  EXPECT_GT(bpt("fp32"), bpt("fp16"));
  EXPECT_GT(bpt("fp16"), bpt("int8"));
  EXPECT_GT(bpt("int8"), bpt("nuq4"));
  EXPECT_GT(bpt("nuq4"), bpt("nuq2-1pct"));
  EXPECT_NE(r.err.find("bench --kv-only: nuq4, ctx 300: filling"), std::string::npos) << "progress on stderr";
  // A context beyond memory: reported with what it would need, not allocated.
  const RunResult big = clitest::run(with(base, {"--ctx", "2000000000", "--kv", "fp32", "--json"}));
  ASSERT_EQ(big.rc, 0) << big.err;
  const json b = json::parse(big.out).at("results").at(0);
  EXPECT_FALSE(b.at("timed").get<bool>());
  EXPECT_NE(b.at("skipped").get<std::string>().find("MemAvailable"), std::string::npos) << b;
  expect_error(clitest::run(with(base, {"--kv", "nuq5"})), {"--kv", "nuq5"});
  expect_error(clitest::run(with(base, {"--ctx", "12x"})), {"--ctx", "12x"});
  expect_error(clitest::run(with(base, {"--ctx", "0"})), {"--ctx", "'0'"});
  expect_error(clitest::run(with(base, {"--quant", "w4a8"})), {"--kv-only", "--quant"});
  // -m: the shape of a model directory's config.json or of a GGUF file's metadata (SmolLM2: 30
  // layers x K and V x 3 KV heads x 64 x 4 bytes = 46,080 bytes per fp32 token).
  const std::vector<std::string> m = {"bench", "--kv-only", "--ctx", "8", "--kv", "fp32", "--reps", "1", "--threads", "1",
                                      "--bw-probe-mib", "16", "--json", "-m"};
  const RunResult g = clitest::run(with(m, {testing::shared_dir() + "/models/smollm2-135m-instruct-q4_1/model.gguf"}));
  ASSERT_EQ(g.rc, 0) << g.err;
  EXPECT_EQ(json::parse(g.out).at("results").at(0).at("bytes_per_token").get<double>(), 30.0 * 2 * 3 * 64 * 4);
  expect_error(clitest::run(with(m, {"/nonexistent/model"})), {"/nonexistent/model", "does not exist"});
}

}  // namespace
}  // namespace sinkq
