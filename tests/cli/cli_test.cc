// The sinkq binary end to end: JSON outputs of every subcommand, and bad inputs that must give a
// clear error (naming the file / tensor / flag), exit code 1, and never a crash.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <sys/wait.h>

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/mmap.h"
#include "cli/cli_run.h"
#include "tokenizer/tokenizer.h"
#include "util/testutil.h"

namespace sinkq {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

using clitest::expect_error;
using clitest::run;
using clitest::RunResult;

std::string stories() { return testing::shared_dir() + "/models/stories260K"; }

// A copy of stories260K's files in a temp dir, where the test may break one of them.
struct ModelCopy {
  testing::TempDir dir;
  ModelCopy() {
    for (const auto& e : fs::directory_iterator(stories())) fs::copy_file(e.path(), dir.file(e.path().filename()));
  }
  std::string path() const { return dir.path(); }
  std::string st() const { return dir.file("model.safetensors"); }
};

// A NaN weight (model.norm.weight[0]: every logit) is an error in ppl and generate, not "ppl nan"
// with exit 0 (issue 18).
TEST(CliErrors, NanWeightsAreAnError) {
  ModelCopy m;
  std::string st = read_file(m.st());
  uint64_t n = 0;
  std::memcpy(&n, st.data(), 8);
  const json h = json::parse(st.substr(8, n));
  const uint64_t off = h.at("model.norm.weight").at("data_offsets").at(0).get<uint64_t>();
  ASSERT_EQ(h.at("model.norm.weight").at("dtype"), "F32");
  const float nan = std::nanf("");
  std::memcpy(st.data() + 8 + n + off, &nan, 4);
  write_file_atomic(m.st(), st);
  expect_error(run({"ppl", "-m", m.path(), "-f", testing::shared_dir() + "/golden/stories260K/tinystories_sample.txt",
                    "--ctx", "64", "--max-windows", "1"}),
               {"window 1", "not finite", "NaN"});
  expect_error(run({"generate", "-m", m.path(), "-p", "Once", "-n", "3"}), {"logit", "NaN"});
}

// A layer count the weights cannot hold is refused by name before anything per layer is
// allocated (issue 18: num_hidden_layers 1e9 ended in "out of memory").
TEST(CliErrors, LayerCountBeyondTheWeights) {
  ModelCopy m;
  json c = json::parse(read_file(m.dir.file("config.json")));
  c["num_hidden_layers"] = 1000000000;
  write_file_atomic(m.dir.file("config.json"), c.dump());
  expect_error(run({"ppl", "-m", m.path(), "-f", testing::shared_dir() + "/golden/stories260K/tinystories_sample.txt"}),
               {"num_hidden_layers 1000000000", "the weights hold", "does not match"});
}

// A text too short for one window fails before the KV cache of --ctx positions is allocated
// (issue 18: 5 GB filled for 18 s first). The model claims 2^30 positions, so a cache of 2^29
// (8 layers x 1 KiB per token: 550 GB) cannot be allocated: were it tried first, the error would
// be the memory refusal, not the text's length.
TEST(CliErrors, ShortTextFailsBeforeTheKvCache) {
  testing::TempDir d;
  testing::TinyModelSpec spec;
  spec.layers = 8;
  spec.max_pos = 1 << 30;
  testing::write_tiny_model(d.path(), spec);
  const std::string text = testing::shared_dir() + "/golden/stories260K/tinystories_sample.txt";
  expect_error(run({"ppl", "-m", d.path(), "-f", text, "--ctx", "536870912"}), {"too short for one window of 536870912"});
  // Simulated quantization with calibration: refused before calibrating, too.
  expect_error(run({"ppl", "-m", d.path(), "-f", text, "--ctx", "536870912", "--preset", "w8a8"}),
               {"too short for one window"});
}

// --version names what a result's bits depend on (docs/architecture.md "Reproducibility"): the CPU,
// the kernel path and the sgemm kernel sets; and the CLI pins OpenBLAS to its Haswell kernels on a
// CPU with AVX2 unless OPENBLAS_CORETYPE is set (then that set runs: as-host.sh relies on it).
std::string lower(std::string s) {
  for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}
// The kernel set in the last "(...)" of --version's output (the AVX2 / scalar paths' OpenBLAS).
std::string last_paren(const std::string& out) {
  const size_t open = out.rfind('('), close = out.rfind(')');
  return open == std::string::npos || close == std::string::npos || close < open ? "none in: " + out
                                                                                 : lower(out.substr(open + 1, close - open - 1));
}
// Sets (or unsets) an environment variable for the test's children and restores it on scope exit.
struct EnvGuard {
  std::string name, saved;
  bool had;
  EnvGuard(const char* n, const char* value) : name(n), had(std::getenv(n) != nullptr) {
    if (had) saved = std::getenv(n);
    if (value) ::setenv(n, value, 1);
    else ::unsetenv(n);
  }
  ~EnvGuard() {
    if (had) ::setenv(name.c_str(), saved.c_str(), 1);
    else ::unsetenv(name.c_str());
  }
};

TEST(Cli, VersionNamesTheHostAndTheKernelSets) {
  {
    EnvGuard unset("OPENBLAS_CORETYPE", nullptr);
    const RunResult r = run({"--version"});
    ASSERT_EQ(r.rc, 0) << r.err;
    EXPECT_NE(r.out.find("host: "), std::string::npos) << r.out;
    EXPECT_NE(r.out.find(" family "), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("scalar paths' sgemm: OpenBLAS"), std::string::npos) << r.out;
    // AVX2 (with FMA and F16C) as sinkq detects it: the pin's condition.
    const bool avx2 = r.out.find("(detected avx2)") != std::string::npos ||
                      r.out.find("(detected avx512)") != std::string::npos;
    if (avx2) EXPECT_EQ(last_paren(r.out), "haswell") << r.out;
  }
  // A kernel set the user names is the one that runs.
  EnvGuard named("OPENBLAS_CORETYPE", "Prescott");
  const RunResult r = run({"--version"});
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(last_paren(r.out), "prescott") << r.out;
}

TEST(Cli, TokenizeJson) {
  const RunResult r = run({"tokenize", "-m", stories(), "--text", "Once upon a time", "--json"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(json::parse(r.out).at("ids"), json({1, 403, 407, 261, 378}));
}

TEST(Cli, GenerateGreedyJsonMatchesGolden) {
  const json g = json::parse(read_file(testing::shared_dir() + "/golden/stories260K/greedy.json"));
  const json& c = g.at("cases")[0];
  const RunResult r = run({"generate", "-m", stories(), "-p", c.at("prompt"), "-n", "100", "--temp", "0", "--json"});
  ASSERT_EQ(r.rc, 0) << r.err;
  const json j = json::parse(r.out);
  EXPECT_EQ(j.at("prompt_ids"), c.at("prompt_ids"));
  EXPECT_EQ(j.at("generated_ids"), c.at("generated_ids"));
  EXPECT_EQ(j.at("text").get<std::string>(), c.at("continuation_text").get<std::string>());
}

TEST(Cli, GenerateStreamsText) {
  const RunResult r = run({"generate", "-m", stories(), "-p", "Once upon a time", "-n", "20", "--temp", "0"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out.rfind("Once upon a time, there was a little girl named Lily.", 0), 0u) << r.out;
}

// --chat: -p as a user message through the model's own chat template (SmolLM2's, from its GGUF),
// tokenized as transformers does (no BOS added), generation stopped at <|im_end|>.
TEST(Cli, GenerateChatRendersTheModelsTemplate) {
  const std::string smol = testing::shared_dir() + "/models/smollm2-135m-instruct-q4_1/model.gguf";
  const RunResult r =
      run({"generate", "-m", smol, "--chat", "--system", "Be brief.", "-p", "What is 2+2?", "-n", "24", "--temp", "0", "--json"});
  ASSERT_EQ(r.rc, 0) << r.err;
  const json j = json::parse(r.out);
  const auto tok = Tokenizer::load(smol);
  EXPECT_EQ(j.at("prompt_ids").get<std::vector<int32_t>>(),
            tok->encode("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n"
                        "<|im_start|>assistant\n",
                        EncodeOptions{.add_special = false}));
  // The reply ends at the template's end of turn (<|im_end|>, excluded), not at -n.
  EXPECT_TRUE(j.at("stopped").get<bool>()) << j.dump();
  EXPECT_LT(j.at("generated_ids").size(), 24u);
  EXPECT_FALSE(j.at("generated_ids").empty());
  expect_error(run({"generate", "-m", smol, "--system", "x", "-p", "hi", "-n", "2"}), {"--system needs --chat"});
  expect_error(run({"generate", "-m", stories(), "--chat", "-p", "hi", "-n", "2"}), {"no chat template"});
}

TEST(Cli, PplJsonMatchesGolden) {
  const json g = json::parse(read_file(testing::shared_dir() + "/golden/stories260K/ppl.json"));
  const RunResult r = run({"ppl", "-m", stories(), "-f", testing::shared_dir() + "/golden/stories260K/tinystories_sample.txt",
                     "--ctx", "512", "--protocol", "bos", "--max-windows", "4", "--json"});
  ASSERT_EQ(r.rc, 0) << r.err;
  const json j = json::parse(r.out);
  EXPECT_EQ(j.at("tokens_scored"), 2044);
  const double want = g.at("tinystories_sample").at("ppl");
  EXPECT_NEAR(j.at("ppl").get<double>(), want, 1e-4 * want);
}

TEST(Cli, InspectJson) {
  const RunResult r = run({"inspect", "-m", stories(), "--json"});
  ASSERT_EQ(r.rc, 0) << r.err;
  const json j = json::parse(r.out);
  EXPECT_EQ(j.at("parameters"), 260032);
  EXPECT_EQ(j.at("tensors").size(), 47u);
}

// A GGUF file is inspected from its header alone (no model load): the parameter count is the sum
// of its tensors' sizes (SmolLM2: tied, 30 layers of 576 / 1536 and a 49152 x 576 table), and it
// says how a command would hold the weights (auto: the file's blocks; fp32 when asked).
TEST(Cli, InspectGgufReadsTheHeader) {
  const std::string smol = testing::shared_dir() + "/models/smollm2-135m-instruct-q4_1/model.gguf";
  const RunResult r = run({"inspect", "-m", smol, "--json"});
  ASSERT_EQ(r.rc, 0) << r.err;
  const json j = json::parse(r.out);
  const int64_t H = 576, I = 1536, KV = 192, L = 30, V = 49152;
  const int64_t per_layer = H * H * 2 + H * KV * 2 + 3 * H * I + 2 * H;  // q, o, k, v, MLP, 2 norms
  EXPECT_EQ(j.at("parameters"), V * H + L * per_layer + H);
  EXPECT_EQ(j.at("format"), "gguf");
  EXPECT_EQ(j.at("weights_held"), "stored");
  EXPECT_TRUE(j.contains("license") && j.contains("name"));
  const RunResult s = run({"inspect", "-m", smol, "--json"}, "SINKQ_GGUF_WEIGHTS=f32 ");
  ASSERT_EQ(s.rc, 0) << s.err;
  EXPECT_EQ(json::parse(s.out).at("weights_held"), "f32");
  expect_error(run({"inspect", "-m", smol}, "SINKQ_GGUF_WEIGHTS=fp8 "), {"SINKQ_GGUF_WEIGHTS='fp8'"});
}

TEST(CliErrors, MissingModelDir) {
  expect_error(run({"inspect", "-m", "/nonexistent/model"}), {"/nonexistent/model"});
}

// A mistyped command or option gets the closest name it has (edit distance <= 2, adjacent swaps
// one edit, under half the word), and a word close to nothing gets no guess.
TEST(CliErrors, DidYouMean) {
  expect_error(run({"pll", "-m", "x"}), {"did you mean 'ppl' for 'pll'?"});
  expect_error(run({"quantise", "-m", "x"}), {"'quantize' for 'quantise'"});
  expect_error(run({"ppl", "-m", "x", "--max-window", "3", "--kdl", "--thread=2"}),
               {"--max-windows for --max-window", "--kld for --kdl", "--threads for --thread"});
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"ppl", "-m", "x", "--frobnicate"}, {"ppl", "-m", "x", "--temp", "0.5"}}) {
    const RunResult r = run(args);  // --temp is generate's, and --help is never the guess
    expect_error(r, {});
    EXPECT_EQ(r.err.find("did you mean"), std::string::npos) << r.err;
  }
}

// A folder holding GGUF files but no config.json: the error names them (the first in sorted order).
TEST(CliErrors, FolderOfGgufFilesNamesThem) {
  testing::TempDir tmp;
  for (const char* n : {"b-q8_0.gguf", "a-q4_1.gguf", "notes.txt"}) std::ofstream(tmp.file(n)) << "x";
  expect_error(run({"inspect", "-m", tmp.path()}),
               {"has no config.json", "2 GGUF file(s)", "-m " + tmp.file("a-q4_1.gguf")});
  testing::TempDir empty;
  const RunResult r = run({"inspect", "-m", empty.path()});
  expect_error(r, {"has no config.json"});
  EXPECT_EQ(r.err.find("GGUF"), std::string::npos) << r.err;
}

// Text that is not UTF-8 — a text to score, a calibration file, a prompt — is an error naming the
// byte offset, line and column (it was accepted silently).
TEST(CliErrors, InvalidUtf8IsNamedByItsOffset) {
  testing::TempDir tmp;
  const std::string model = testing::shared_dir() + "/models/stories260K";
  std::string text;
  for (int i = 0; i < 40; ++i) text += "Once upon a time there was a little dog.\n";
  text += "caf\xe9 au lait\n";  // latin-1 'é' on line 41, column 4 (byte offset 40·41 + 3)
  for (int i = 0; i < 40; ++i) text += "The end.\n";
  std::ofstream(tmp.file("latin1.txt"), std::ios::binary) << text;
  const std::string where = "invalid byte e9 at byte offset 1643 (line 41, column 4)";
  expect_error(run({"ppl", "-m", model, "-f", tmp.file("latin1.txt"), "--ctx", "32"}), {"latin1.txt", where});
  expect_error(run({"quantize", "-m", model, "--preset", "prefixquant-w4a4kv4", "--calib", tmp.file("latin1.txt"),
                    "-o", tmp.file("a")}),
               {"calibration file", where});
  expect_error(run({"generate", "-m", model, "-p", "na\xc3\xafve \xff", "-n", "2"}),  // "naïve", then 0xff
               {"the prompt (-p)", "invalid byte ff at byte offset 7"});
  EXPECT_FALSE(fs::exists(tmp.file("a")));
}

// The first windows of a huge text score in bounded memory: a 64 GB file (sparse: 200 KB of text,
// then NULs) with --max-windows reads only the text those windows need, under a 1 GiB data limit
// (tokenized whole it would take ~24 bytes a byte); the windows equal those of the text alone.
// Without --max-windows it is a clear error before anything is read.
TEST(CliPpl, FirstWindowsOfAHugeFileInBoundedMemory) {
  testing::TempDir tmp;
  const std::string model = testing::shared_dir() + "/models/stories260K";
  std::string text;
  for (int i = 0; text.size() < 200'000; ++i) text += fmt::format("Line {}: once upon a time there was a dog.\n", i);
  std::ofstream(tmp.file("small.txt"), std::ios::binary) << text;
  {
    std::ofstream f(tmp.file("huge.txt"), std::ios::binary);
    f << text;
  }
  fs::resize_file(tmp.file("huge.txt"), uint64_t(64) << 30);  // a hole: no disk, reads as NULs
  const std::vector<std::string> args{"--ctx", "64", "--max-windows", "4", "--json", "-m", model};
  auto with = [&](const std::string& file) {
    std::vector<std::string> a{"ppl", "-f", file};
    a.insert(a.end(), args.begin(), args.end());
    return a;
  };
  const RunResult huge = run(with(tmp.file("huge.txt")), "ulimit -d 1048576; ");
  ASSERT_EQ(huge.rc, 0) << huge.err;
  const RunResult small = run(with(tmp.file("small.txt")));
  ASSERT_EQ(small.rc, 0) << small.err;
  const auto h = nlohmann::json::parse(huge.out), s = nlohmann::json::parse(small.out);
  EXPECT_EQ(h["window_nll"], s["window_nll"]);
  EXPECT_EQ(h["ppl"], s["ppl"]);
  expect_error(run({"ppl", "-f", tmp.file("huge.txt"), "--ctx", "64", "-m", model}),
               {"huge.txt", "is 68.72 GB of text", "--max-windows"});
}

// llama.cpp's short flags where sinkq has the option (-c/--ctx-size, -t, -s) give what the long
// ones give; progress lines carry the elapsed time and, past the first report, an ETA.
TEST(CliFlags, LlamaCppAliasesAndProgressTiming) {
  const std::string model = testing::shared_dir() + "/models/stories260K";
  const std::string text = testing::shared_dir() + "/data/wikitext-2/wikitext2_test_joined.txt";
  const RunResult a = run({"ppl", "-m", model, "-f", text, "-c", "64", "-t", "1", "--max-windows", "3", "--json"});
  const RunResult b = run({"ppl", "-m", model, "-f", text, "--ctx-size", "64", "--threads", "1", "--max-windows", "3", "--json"});
  const RunResult c = run({"ppl", "-m", model, "-f", text, "--ctx", "64", "--threads", "1", "--max-windows", "3", "--json"});
  ASSERT_EQ(a.rc, 0) << a.err;
  ASSERT_EQ(b.rc, 0) << b.err;
  ASSERT_EQ(c.rc, 0) << c.err;
  EXPECT_EQ(json::parse(a.out)["window_nll"], json::parse(c.out)["window_nll"]);
  EXPECT_EQ(json::parse(b.out)["window_nll"], json::parse(c.out)["window_nll"]);
  EXPECT_EQ(json::parse(a.out)["ctx"], 64);
  EXPECT_NE(a.err.find("ppl: window 3/3  ["), std::string::npos) << a.err;
  EXPECT_NE(a.err.find(" s elapsed]"), std::string::npos) << a.err;
  const RunResult g1 = run({"generate", "-m", model, "-p", "Once", "-n", "6", "--temp", "0.8", "-s", "7", "-c", "32"});
  const RunResult g2 = run({"generate", "-m", model, "-p", "Once", "-n", "6", "--temp", "0.8", "--seed", "7", "--ctx", "32"});
  ASSERT_EQ(g1.rc, 0) << g1.err;
  EXPECT_EQ(g1.out, g2.out);
}

TEST(CliErrors, TruncatedSafetensors) {
  ModelCopy m;
  fs::resize_file(m.st(), 5000);
  expect_error(run({"generate", "-m", m.path(), "-p", "hi", "-n", "2"}), {"model.safetensors"});
}

TEST(CliErrors, HeaderPointsPastTheEnd) {
  ModelCopy m;
  std::string s = read_file(m.st());
  uint64_t n = 0;
  std::memcpy(&n, s.data(), 8);
  n = s.size() * 2;  // header length larger than the file
  std::memcpy(s.data(), &n, 8);
  std::ofstream(m.st(), std::ios::binary | std::ios::trunc) << s;
  expect_error(run({"inspect", "-m", m.path()}), {"model.safetensors"});
}

TEST(CliErrors, WrongShape) {
  ModelCopy m;
  json cfg = json::parse(read_file(m.dir.file("config.json")));
  cfg["intermediate_size"] = 100;
  std::ofstream(m.dir.file("config.json"), std::ios::trunc) << cfg.dump();
  expect_error(run({"inspect", "-m", m.path()}), {"mlp.gate_proj.weight", "100"});
}

TEST(CliErrors, UnknownArchitecture) {
  ModelCopy m;
  json cfg = json::parse(read_file(m.dir.file("config.json")));
  cfg["architectures"] = {"GPT2LMHeadModel"};
  std::ofstream(m.dir.file("config.json"), std::ios::trunc) << cfg.dump();
  expect_error(run({"ppl", "-m", m.path(), "-f", m.dir.file("config.json")}), {"GPT2LMHeadModel"});
}

TEST(CliErrors, EmptyText) {
  testing::TempDir t;
  std::ofstream(t.file("empty.txt")).flush();
  expect_error(run({"ppl", "-m", stories(), "-f", t.file("empty.txt")}), {"empty.txt", "empty"});
  expect_error(run({"ppl", "-m", stories(), "-f", t.file("missing.txt")}), {"missing.txt"});
}

TEST(CliErrors, ContextLongerThanPositions) {
  expect_error(run({"ppl", "-m", stories(), "-f", testing::shared_dir() + "/golden/stories260K/tinystories_sample.txt",
                    "--ctx", "4096"}),
               {"--ctx", "512"});
  expect_error(run({"generate", "-m", stories(), "-p", "Once", "-n", "1000"}), {"-n", "512"});
  // No prefix given: the message does not speak of one (was "plus the 0-token prefix (--prefix )").
  const RunResult r = run({"generate", "-m", stories(), "-p", "Once", "-n", "3", "--ctx", "513"});
  expect_error(r, {"--ctx 513 exceeds the model's 512 positions"});
  EXPECT_EQ(r.err.find("prefix"), std::string::npos) << r.err;
}

TEST(CliErrors, BadFlagValues) {
  expect_error(run({"ppl", "-m", stories(), "-f", stories() + "/config.json", "--protocol", "wiki"}), {"--protocol", "wiki"});
  expect_error(run({"generate", "-m", stories(), "-p", "x", "--top-p", "2"}), {"--top-p"});
  expect_error(run({"serve", "-m", stories(), "--port", "0", "--batch-prefill", "some"}),
               {"unknown --batch-prefill 'some'", "short, all or off"});
  const RunResult r = run({"frobnicate"});
  EXPECT_FALSE(r.crashed);
  EXPECT_NE(r.rc, 0);
  // Flags that do not parse are errors like the others: "sinkq: error:", exit 1, the flag named
  // (issue 18: CLI11's own exits 104-114 without the prefix; --ctx -1 / 0 / "" silently meaning
  // the default, 0x40 meaning 64, a seed of 2^64 accepted, --threads -1 / 10000).
  const std::string f = testing::shared_dir() + "/golden/stories260K/tinystories_sample.txt";
  const std::vector<std::string> ppl{"ppl", "-m", stories(), "-f", f};
  auto with = [](std::vector<std::string> a, std::initializer_list<std::string> more) {
    a.insert(a.end(), more);
    return a;
  };
  for (const char* bad : {"-1", "0", "", "0x40", "abc", "1e3", "99999999999999999999"})
    expect_error(run(with(ppl, {"--ctx", bad})), {"sinkq: error:", "--ctx"});
  expect_error(run(with(ppl, {"--ctx"})), {"sinkq: error:", "--ctx"});          // missing value
  expect_error(run(with(ppl, {"--frobnicate"})), {"sinkq: error:", "--frobnicate"});
  expect_error(run(with(ppl, {"--threads", "-1"})), {"sinkq: error:", "--threads", "[1, 1024]"});
  expect_error(run(with(ppl, {"--threads", "10000"})), {"sinkq: error:", "--threads", "[1, 1024]"});
  expect_error(run({"tokenize", "-m", stories(), "-p", "x", "--threads", "10000"}), {"--threads", "[1, 1024]"});
  expect_error(run({"generate", "-m", stories(), "-p", "x", "--seed", "18446744073709551616"}), {"--seed"});
  expect_error(run({"generate", "-m", stories(), "-p", "x", "-n", "-3"}), {"-n"});
  // --help still prints and exits 0.
  const RunResult h = run({"ppl", "--help"});
  EXPECT_EQ(h.rc, 0);
  EXPECT_NE(h.out.find("--ctx"), std::string::npos);
}

// The step team's and site sharing's environment (kernels/team.h, model/model.h): a bad
// SINKQ_TEAM / SINKQ_SPIN_US / SINKQ_SITE_SHARING is an error naming the variable when the first
// step reads it (on the calling thread, never inside a worker: no crash); SINKQ_TEAM=0,
// SINKQ_SPIN_US=0 and SINKQ_SITE_SHARING=0 generate the same text as the default.
TEST(CliErrors, TeamEnvironment) {
  const std::vector<std::string> gen{"generate", "-m", stories(), "-p", "Once upon a time", "-n", "12", "--temp", "0",
                                     "--threads", "2"};
  const RunResult base = run(gen);
  ASSERT_EQ(base.rc, 0) << base.err;
  struct Case {
    const char* var;
    const char* value;
    bool ok;
  };
  for (const Case& c : {Case{"SINKQ_TEAM", "2", false}, Case{"SINKQ_SPIN_US", "-5", false},
                        Case{"SINKQ_SPIN_US", "10ms", false}, Case{"SINKQ_TEAM", "0", true},
                        Case{"SINKQ_SPIN_US", "0", true}, Case{"SINKQ_SITE_SHARING", "yes", false},
                        Case{"SINKQ_SITE_SHARING", "0", true}}) {
    SCOPED_TRACE(std::string(c.var) + "=" + c.value);
    ::setenv(c.var, c.value, 1);
    const RunResult r = run(gen);
    ::unsetenv(c.var);
    if (c.ok) {
      EXPECT_EQ(r.rc, 0) << r.err;
      EXPECT_EQ(r.out, base.out);
    } else {
      expect_error(r, {"sinkq: error:", c.var});
    }
  }
}

TEST(Cli, PplQuantPresetJsonHasConfigAndKld) {
  const RunResult r = run({"ppl", "-m", stories(), "-f", testing::shared_dir() + "/golden/stories260K/tinystories_sample.txt",
                           "--ctx", "256", "--max-windows", "2", "--preset", "w8a8kv8", "--kv-gran", "token", "--kld", "--json"});
  ASSERT_EQ(r.rc, 0) << r.err;
  const json j = json::parse(r.out);
  EXPECT_EQ(j.at("config").at("preset"), "w8a8kv8");
  EXPECT_EQ(j.at("config").at("weights").at("bits"), 8);
  EXPECT_EQ(j.at("config").at("activations").at("mode"), "dynamic");
  EXPECT_EQ(j.at("config").at("kv").at("granularity"), "per_token");  // the flag overrides the preset
  EXPECT_GT(j.at("kld").get<double>(), 0.0);
  EXPECT_EQ(j.at("window_kld").size(), 2u);
  // Without --kld there is no kld field; without quantization flags the config says so.
  const RunResult f = run({"ppl", "-m", stories(), "-f", testing::shared_dir() + "/golden/stories260K/tinystories_sample.txt",
                           "--ctx", "256", "--max-windows", "1", "--json"});
  ASSERT_EQ(f.rc, 0) << f.err;
  const json k = json::parse(f.out);
  EXPECT_FALSE(k.contains("kld"));
  EXPECT_EQ(k.at("config").at("weights"), json({{"bits", 16}}));
}

TEST(CliErrors, BadQuantFlags) {
  const std::string text = testing::shared_dir() + "/golden/stories260K/tinystories_sample.txt";
  auto ppl = [&](std::vector<std::string> extra) {
    std::vector<std::string> a{"ppl", "-m", stories(), "-f", text, "--ctx", "256", "--max-windows", "1"};
    a.insert(a.end(), extra.begin(), extra.end());
    return run(a);
  };
  expect_error(ppl({"--preset", "w8a8", "--a-quant", "static"}), {"--a-quant", "static", "--calib"});
  expect_error(ppl({"--w-bits", "1"}), {"--w-bits"});
  expect_error(ppl({"--kv-bits", "12"}), {"--kv-bits"});
  expect_error(ppl({"--preset", "w2a2"}), {"--preset", "w2a2"});
  expect_error(ppl({"--a-quant", "minmax"}), {"--a-quant", "minmax"});
  expect_error(ppl({"--kv-gran", "channel"}), {"--kv-gran"});
  expect_error(ppl({"--a-bits", "4", "--a-quant", "cross", "--a-alpha", "2"}), {"--a-alpha"});
  expect_error(ppl({"--w-bits", "4", "--w-group", "-1"}), {"--w-group"});
  expect_error(ppl({"--w-bits", "4", "--w-clip", "1.5"}), {"--w-clip"});
  expect_error(ppl({"--preset", "w4a8", "--finetune", "blockwise"}), {"--finetune blockwise", "--calib"});
  expect_error(ppl({"--preset", "w4a8", "--finetune", "endtoend"}), {"--finetune", "endtoend"});
  expect_error(ppl({"--preset", "w4a8", "--finetune-lr", "1e-5"}), {"--finetune-lr", "needs --finetune blockwise"});
  expect_error(ppl({"--finetune", "blockwise", "--calib", text}), {"--finetune blockwise", "quantize"});
  expect_error(ppl({"--preset", "w4a8", "--finetune", "blockwise", "--finetune-target", "x", "--calib", text}),
               {"--finetune-target", "'x'"});
  // KVQuant's codebook flags.
  expect_error(ppl({"--kv-bits", "3", "--kv-codebook", "nuq"}), {"--kv-codebook", "'nuq'"});
  expect_error(ppl({"--kv-bits", "5", "--kv-codebook", "nf"}), {"--kv-bits 5", "2, 3 or 4"});
  expect_error(ppl({"--kv-bits", "4", "--kv-outliers", "0.01"}), {"--kv-outliers", "--kv-codebook"});
  expect_error(ppl({"--kv-bits", "4", "--kv-codebook", "nf", "--kv-outliers", "0.5"}), {"--kv-outliers", "[0, 0.1]"});
  expect_error(ppl({"--kv-bits", "4", "--kv-codebook", "nf", "--kv-keys", "channel"}), {"--kv-keys", "'channel'"});
  expect_error(ppl({"--kv-bits", "4", "--kv-codebook", "nf", "--kv-quant", "static"}), {"--kv-quant", "--kv-codebook"});
  expect_error(ppl({"--kv-bits", "3", "--kv-codebook", "fisher"}), {"--kv-codebook fisher", "--calib"});
  expect_error(ppl({"--kv-bits", "4", "--kv-recent", "16"}), {"--kv-recent", "--kv-codebook"});
  expect_error(ppl({"--kv-bits", "4", "--kv-codebook", "nf", "--kv-keys", "pre_rope_token", "--kv-recent", "16",
                    "--kv-recent-bits", "4"}),
               {"--kv-recent-bits 4", "int8"});
  expect_error(ppl({"--kv-bits", "4", "--kv-codebook", "nf", "--kv-keys", "pre_rope_token", "--kv-recent", "-2"}),
               {"--kv-recent", "[0, 2^20]"});
}

}  // namespace
}  // namespace sinkq
