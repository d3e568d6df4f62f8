// tests/dist — MPI pipeline parallelism (src/dist, issue 21): the layer partition, stage loading,
// a chain of stages in one process equal to the whole model bit for bit, and `mpirun -np 1/2/3
// --oversubscribe sinkq ...` against the one-process run (results bit-identical; faults end the job
// with an error, never a hang).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "core/mmap.h"
#include "dist/mpi.h"
#include "dist/pipeline.h"
#include "model/model.h"
#include "runtime/artifact.h"
#include "runtime/quantized_model.h"
#include "sinkq/engine.h"
#include "util/testutil.h"

namespace sinkq {
namespace {

using testing::shared_dir;

std::string smollm2() { return shared_dir() + "/models/smollm2-135m-instruct-q4_1/model.gguf"; }
std::string mixtext() { return shared_dir() + "/models/mixtext-2.5M"; }

// ---- the partition ----

// The largest stage of a partition (the DP's objective).
int64_t largest(const dist::LayerBytes& b, const std::vector<LayerRange>& p) {
  int64_t worst = 0;
  for (size_t s = 0; s < p.size(); ++s) {
    int64_t bytes = (s == 0 ? b.first : 0) + (s + 1 == p.size() ? b.last : 0);
    for (int l = p[s].begin; l < p[s].end; ++l) bytes += b.layers[size_t(l)];
    worst = std::max(worst, bytes);
  }
  return worst;
}

// Every contiguous split into `ranks` non-empty stages, by brute force: the least largest stage.
int64_t brute_force(const dist::LayerBytes& b, int ranks) {
  const int L = int(b.layers.size());
  int64_t best = INT64_MAX;
  std::vector<int> cut(size_t(ranks) + 1);
  std::function<void(int, int)> go = [&](int s, int begin) {
    if (s == ranks - 1) {
      std::vector<LayerRange> p;
      cut[size_t(s)] = begin;
      cut[size_t(ranks)] = L;
      for (int i = 0; i < ranks; ++i) p.push_back({cut[size_t(i)], cut[size_t(i) + 1]});
      best = std::min(best, largest(b, p));
      return;
    }
    cut[size_t(s)] = begin;
    for (int end = begin + 1; end <= L - (ranks - 1 - s); ++end) {
      cut[size_t(s) + 1] = end;
      go(s + 1, end);
    }
  };
  go(0, 0);
  return best;
}

TEST(Partition, ContiguousNonEmptyAndOptimal) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    dist::LayerBytes b;
    const int L = 1 + int(rng() % 9);
    for (int l = 0; l < L; ++l) b.layers.push_back(1 + int64_t(rng() % 1000));
    b.first = int64_t(rng() % 3000);
    b.last = int64_t(rng() % 3000);
    for (int ranks = 1; ranks <= L; ++ranks) {
      const std::vector<LayerRange> p = dist::partition_layers(b, ranks);
      ASSERT_EQ(int(p.size()), ranks);
      EXPECT_EQ(p.front().begin, 0);
      EXPECT_EQ(p.back().end, L);
      for (int s = 0; s < ranks; ++s) {
        EXPECT_LT(p[size_t(s)].begin, p[size_t(s)].end) << "stage " << s << " is empty";
        if (s) {
          EXPECT_EQ(p[size_t(s)].begin, p[size_t(s) - 1].end);
        }
      }
      EXPECT_EQ(largest(b, p), brute_force(b, ranks)) << "L " << L << " ranks " << ranks;
    }
  }
}

TEST(Partition, MoreRanksThanLayersIsAnError) {
  dist::LayerBytes b;
  b.layers = {1, 2, 3};
  try {
    dist::partition_layers(b, 4);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("mpirun -np 4: the model has 3 layers"), std::string::npos) << e.what();
  }
}

TEST(Partition, OfTheFilesHeaders) {
  // SmolLM2's GGUF: 30 equal layers, as the fp32 they are dequantized to; the tied table at both ends.
  const dist::LayerBytes g = dist::layer_bytes(smollm2());
  ASSERT_EQ(g.layers.size(), 30u);
  const int64_t H = 576, I = 1536, V = 49152, KV = 3 * 64;
  const int64_t layer = 4 * (2 * H + H * H * 2 + 2 * KV * H + 3 * H * I);  // norms, q/o, k/v, MLP
  for (int64_t b : g.layers) EXPECT_EQ(b, layer);
  EXPECT_EQ(g.first, 4 * V * H);
  EXPECT_EQ(g.last, 4 * V * H + 4 * H);  // + the final norm
  const std::vector<LayerRange> p = dist::partition_layers(g, 2);
  EXPECT_EQ(p[0].end, 15);  // symmetric ends: the middle
}

// ---- stages in one process ----

// The later stages of a chain, in this process: what the MPI link does, without MPI.
struct ChainLink final : StageLink {
  std::vector<Forward*> later;
  void forward(std::span<const int32_t> tokens, int64_t body_past, const float* x, int64_t first_row,
               float* logits_out) override {
    const int64_t H = later[0]->model().config().hidden_size;
    std::vector<float> buf(x, x + int64_t(tokens.size()) * H);
    for (size_t i = 0; i < later.size(); ++i) {
      Forward& f = *later[i];
      if (body_past == 0) f.reset();
      else if (body_past < f.body_size()) f.truncate(body_past);
      f.run_stage(tokens, buf.data(), first_row, i + 1 == later.size() ? logits_out : nullptr);
    }
  }
};

// Prefill (several chunks), decode steps, a rewind and a re-step: the chain's logits equal the whole
// model's bit for bit (the same per-layer code on the same chunks).
void expect_chain_equals_whole(const std::function<std::shared_ptr<const Model>(LayerRange)>& load,
                               const std::function<void(Forward&)>& prepare, const std::vector<int>& cuts) {
  const std::shared_ptr<const Model> whole = load(LayerRange::all());
  const int L = whole->config().num_layers;
  const int64_t V = whole->config().vocab_size;
  std::vector<std::shared_ptr<const Model>> stages;
  std::vector<std::unique_ptr<Forward>> fwds;
  for (size_t s = 0; s + 1 < cuts.size(); ++s) {
    stages.push_back(load(LayerRange{cuts[s], cuts[s + 1]}));
    fwds.push_back(std::make_unique<Forward>(stages.back(), 64, /*max_batch=*/16));
    prepare(*fwds.back());
  }
  auto link = std::make_shared<ChainLink>();
  for (size_t s = 1; s < fwds.size(); ++s) link->later.push_back(fwds[s].get());
  fwds[0]->set_link(link);
  Forward ref(whole, 64, 16);
  prepare(ref);
  std::vector<int32_t> prompt(37);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = int32_t((i * 7919 + 13) % uint64_t(V));
  auto same = [&](std::span<const float> a, std::span<const float> b, const char* what) {
    ASSERT_EQ(a.size(), b.size()) << what;
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << what << ": logits differ";
  };
  same(fwds[0]->step(prompt, true), ref.step(prompt, true), "prefill (3 chunks of <= 16)");
  for (int32_t t : {5, 17, 99}) {
    const int32_t id = t % int32_t(V);
    same(fwds[0]->step(std::span(&id, 1), false), ref.step(std::span(&id, 1), false), "decode");
  }
  if (ref.rewindable()) {
    fwds[0]->truncate(20);
    ref.truncate(20);
    same(fwds[0]->step(std::span(prompt).subspan(3, 9), true), ref.step(std::span(prompt).subspan(3, 9), true),
         "after a rewind");
  }
  fwds[0]->reset();
  ref.reset();
  same(fwds[0]->step(std::span(prompt).first(11), false), ref.step(std::span(prompt).first(11), false),
       "a new sequence");
  // Each stage holds its own layers' KV rows only.
  EXPECT_LT(fwds[1]->kv_bytes(), ref.kv_bytes());
  (void)L;
}

TEST(Stage, LoadsOnlyItsLayers) {
  const std::shared_ptr<const Model> whole = Model::load(smollm2());
  const std::shared_ptr<const Model> mid = Model::load(smollm2(), LayerRange{10, 20});
  EXPECT_FALSE(mid->whole());
  EXPECT_EQ(mid->stage().begin, 10);
  EXPECT_EQ(mid->stage().end, 20);
  const ModelWeights& w = mid->weights();
  EXPECT_EQ(w.embed.data, nullptr);
  EXPECT_EQ(w.final_norm, nullptr);
  for (int l = 0; l < 30; ++l) {
    const bool held = l >= 10 && l < 20;
    EXPECT_EQ(w.layers[size_t(l)].mat(LinearRole::Q).data != nullptr, held) << "layer " << l;
    EXPECT_EQ(w.layers[size_t(l)].vec(VecRole::AttnNorm) != nullptr, held) << "layer " << l;
    EXPECT_EQ(w.layers[size_t(l)].mat(LinearRole::Down).rows, whole->weights().layers[size_t(l)].mat(LinearRole::Down).rows);  // shapes: all
  }
  const Mat& a = w.layers[12].mat(LinearRole::Gate);
  const Mat& b = whole->weights().layers[12].mat(LinearRole::Gate);
  ASSERT_EQ(a.dtype, b.dtype);
  EXPECT_EQ(std::memcmp(a.data, b.data, size_t(a.rows) * dtype_row_bytes(a.dtype, a.cols)), 0);
  const Mat& head = whole->weights().lm_head;
  EXPECT_EQ(mid->decode_weight_bytes() * 3,
            whole->decode_weight_bytes() - uint64_t(head.rows) * dtype_row_bytes(head.dtype, head.cols))
      << "a third of the layers, no head";
  // The last stage of a tied model holds the table (its LM head), the first the embeddings.
  const std::shared_ptr<const Model> last = Model::load(smollm2(), LayerRange{25, 30});
  EXPECT_NE(last->weights().lm_head.data, nullptr);
  EXPECT_NE(last->weights().final_norm, nullptr);
  // A stage runs only as part of a pipeline.
  Forward lone(mid, 8);
  const int32_t id = 1;
  EXPECT_THROW(lone.step(std::span(&id, 1), false), Error);
  EXPECT_THROW(Model::load(smollm2(), LayerRange{20, 10}), Error);
  EXPECT_THROW(Model::load(smollm2(), LayerRange{0, 31}), Error);
}

TEST(Stage, ChainOfStagesEqualsTheWholeModel) {
  // The fp32 model of the GGUF file (dequantized per stage) and an HF directory.
  expect_chain_equals_whole([](LayerRange r) { return Model::load(smollm2(), r); }, [](Forward&) {}, {0, 7, 19, 30});
  expect_chain_equals_whole([](LayerRange r) { return Model::load(mixtext(), r); }, [](Forward&) {}, {0, 1, 6});
}

TEST(Stage, ChainOfArtifactStagesEqualsTheWholeArtifact) {
  // Packed artifacts: W4A8 + KV4 + a [BOS] prefix + the int4 head; W8A8 + static KV8 (calibrated).
  testing::TempDir tmp;
  quant::Recipe a = quant::Recipe::from_preset("w4a8kv4");
  a.prefix.spec = "bos";
  a.head.bits = 4;
  a.head.group = 32;
  quant::Recipe b = quant::Recipe::from_preset("w8a8kv8");
  b.kv.mode = quant::KvMode::Static;
  b.calib.file = shared_dir() + "/data/wikitext-2/wiki.valid.tokens";
  b.calib.samples = 2;
  b.calib.len = 64;
  int n = 0;
  for (const quant::Recipe& r : {a, b}) {
    const std::string out = tmp.file("art" + std::to_string(n++));
    quantize_artifact(mixtext(), out, r);
    std::vector<std::shared_ptr<const runtime::QuantizedModel>> keep;
    expect_chain_equals_whole(
        [&](LayerRange range) {
          keep.push_back(std::make_shared<const runtime::QuantizedModel>(runtime::load_artifact(out, range)));
          return keep.back()->model;
        },
        [&](Forward& f) {
          for (const auto& q : keep)
            if (q->model.get() == &f.model()) q->attach(f);
        },
        {0, 2, 3, 6});
  }
}

// ---- mpirun ----

// A build without MPI (-DSINKQ_MPI=OFF, or none found) has no mpirun path to test; what it does
// under mpirun with several ranks (it refuses them) is dist/mpi_none.cc init().
#define SKIP_WITHOUT_MPI() \
  if (!dist::built_with_mpi()) GTEST_SKIP() << "built without MPI"

std::string quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) {
    if (c == '\'') q.append("'\\''");
    else q.push_back(c);
  }
  return q + "'";
}

struct JobRun {
  int rc = -1;
  std::string out, err;
};

// `mpirun -np N --oversubscribe sinkq args` (np 0: sinkq alone), 1 thread per rank, bounded by
// `timeout` so that a hang fails the test instead of the suite. OpenMPI refuses root unless told.
std::string mpi_prefix(int np) {
  return np == 0 ? std::string()
                 : "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none "
                   "mpirun --oversubscribe -np " + std::to_string(np) + " ";
}
std::string sinkq_cmd(const std::vector<std::string>& args) {
  std::string cmd = quote(SINKQ_BINARY);
  for (const auto& a : args) {
    cmd.push_back(' ');
    cmd += quote(a);
  }
  return cmd;
}
JobRun run_shell(const std::string& line, int timeout_s = 240) {
  testing::TempDir tmp;
  const std::string cmd = "timeout -k 5 " + std::to_string(timeout_s) + " sh -c " + quote(line) + " >" +
                          tmp.file("out") + " 2>" + tmp.file("err") + " </dev/null";
  const int st = std::system(cmd.c_str());
  JobRun r;
  r.rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  r.out = read_file(tmp.file("out"));
  r.err = read_file(tmp.file("err"));
  return r;
}
JobRun run(int np, const std::vector<std::string>& args, const std::string& env = "") {
  return run_shell(env + " " + mpi_prefix(np) + sinkq_cmd(args));
}

std::vector<std::string> ppl_args(const std::string& model, int64_t ctx, int windows) {
  return {"ppl", "-m", model, "-f", shared_dir() + "/data/wikitext-2/wiki.test.tokens", "--ctx", std::to_string(ctx),
          "--max-windows", std::to_string(windows), "--threads", "1", "--json"};
}

// The figures of a ppl --json run, printed exactly (doubles round-trip through JSON's 17 digits).
std::string ppl_figures(const JobRun& r) {
  const nlohmann::json j = nlohmann::json::parse(r.out, nullptr, false);
  if (!j.is_object() || !j.contains("window_nll")) return "no JSON: " + r.err;
  std::string f = j["mean_nll"].dump() + " " + j["window_nll"].dump() + " " + j["tokens_scored"].dump();
  if (j.contains("kld")) f += " kld " + j["kld"].dump() + " " + j["window_kld"].dump();
  return f;
}

// One ppl case: SmolLM2 at full precision, mixtext, and the packed artifact with its prefix, also
// with --kld (the source model's stages behind the same prefix, computed over the stages); 5
// windows so the pipeline holds several at once. One test per case, each under its own timeout
// (the four in one test took 65 s idle). SmolLM2's cases run at one rank count each (every rank
// loads the model; under a load of ~9 the artifact's --kld case at 1, 2 and 3 ranks took 90 s);
// 3 ranks give a first, middle and last stage (with --kld: the reference's middle stage too).
struct PplCase {
  const char* name;
  std::string (*model)();  // nullptr: the artifact made by the test
  int64_t ctx;
  bool kld;
  std::vector<int> ranks;
};
const PplCase kPplCases[] = {{"smollm2", &smollm2, 128, false, {2}},
                             {"mixtext", &mixtext, 96, false, {1, 2, 3}},
                             {"artifact", nullptr, 128, false, {2}},
                             {"artifact_kld", nullptr, 128, true, {3}}};

void PrintTo(const PplCase& c, std::ostream* os) { *os << c.name; }

class MpirunPpl : public ::testing::TestWithParam<PplCase> {};

TEST_P(MpirunPpl, BitIdenticalToOneProcess) {
  SKIP_WITHOUT_MPI();
  ASSERT_EQ(std::system("command -v mpirun >/dev/null"), 0) << "mpirun (openmpi-bin) is not installed";
  const PplCase& c = GetParam();
  testing::TempDir tmp;
  std::string model;
  if (c.model) {
    model = c.model();
  } else {
    model = tmp.file("w4a8kv4-bos-head4");
    const JobRun q = run(0, {"quantize", "-m", smollm2(), "--preset", "w4a8kv4", "--prefix", "bos", "--head-bits", "4",
                          "-o", model});
    ASSERT_EQ(q.rc, 0) << q.err;
  }
  std::vector<std::string> args = ppl_args(model, c.ctx, 5);
  if (c.kld) args.push_back("--kld");
  const std::string one = ppl_figures(run(0, args));
  ASSERT_EQ(one.rfind("no JSON", 0), std::string::npos) << one;
  EXPECT_EQ(one.find(" kld ") != std::string::npos, c.kld) << one;
  for (int np : c.ranks) {
    const JobRun r = run(np, args);
    EXPECT_EQ(r.rc, 0) << r.err;
    EXPECT_EQ(ppl_figures(r), one) << model << " -np " << np;
    if (np > 1) {
      EXPECT_NE(r.err.find("sinkq (rank " + std::to_string(np - 1) + " of " + std::to_string(np) + "): layers"),
                std::string::npos) << r.err;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Models, MpirunPpl, ::testing::ValuesIn(kPplCases),
                         [](const ::testing::TestParamInfo<PplCase>& i) { return std::string(i.param.name); });

TEST(Mpirun, GenerateAndBenchRunThroughThePipeline) {
  SKIP_WITHOUT_MPI();
  const std::vector<std::string> gen = {"generate", "-m", smollm2(), "-p", "The capital of France is", "-n", "16",
                                        "--threads", "1"};
  const JobRun one = run(0, gen);
  ASSERT_EQ(one.rc, 0) << one.err;
  const JobRun three = run(3, gen);
  EXPECT_EQ(three.rc, 0) << three.err;
  EXPECT_EQ(three.out, one.out) << "greedy text differs";
  const JobRun b = run(2, {"bench", "-m", mixtext(), "--prefill", "32", "--decode", "8", "--reps", "1", "--threads", "1",
                        "--bw-probe-mib", "16", "--json"});
  ASSERT_EQ(b.rc, 0) << b.err;
  const nlohmann::json j = nlohmann::json::parse(b.out, nullptr, false);
  ASSERT_TRUE(j.is_object()) << b.out << b.err;
  EXPECT_EQ(j["pipeline"]["ranks"], 2);
  EXPECT_GT(j["decode_tokens_per_s"].get<double>(), 0);
}

TEST(Mpirun, MismatchedLaunchesEndEveryRankWithAnError) {
  SKIP_WITHOUT_MPI();
  // More ranks than layers (mixtext has 6).
  JobRun r = run(7, ppl_args(mixtext(), 64, 1));
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.err.find("mpirun -np 7: the model has 6 layers"), std::string::npos) << r.err;
  // Two ranks with different arguments (an MPMD launch).
  r = run_shell(mpi_prefix(1) + sinkq_cmd(ppl_args(mixtext(), 64, 1)) + " : -np 1 " +
                sinkq_cmd(ppl_args(mixtext(), 64, 2)));
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.err.find("rank 1 runs another binary or other arguments than rank 0"), std::string::npos) << r.err;
  // A command that does not run over ranks.
  r = run(2, {"inspect", "-m", mixtext()});
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.err.find("sinkq inspect does not run under mpirun -np 2"), std::string::npos) << r.err;
  // A recipe that needs the whole model at once.
  r = run(2, {"ppl", "-m", mixtext(), "-f", shared_dir() + "/data/wikitext-2/wiki.test.tokens", "--preset",
              "kvquant-4bit", "--calib", shared_dir() + "/data/wikitext-2/wiki.valid.tokens", "--calib-samples", "2",
              "--calib-len", "32"});
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.err.find("--kv-codebook is not distributed yet"), std::string::npos) << r.err;
}

// Every file of two artifact directories, byte for byte.
void expect_same_files(const std::string& a, const std::string& b) {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(a)) names.push_back(e.path().filename());
  std::sort(names.begin(), names.end());
  ASSERT_FALSE(names.empty()) << a;
  size_t in_b = 0;
  for (const auto& e : std::filesystem::directory_iterator(b)) (void)e, ++in_b;
  EXPECT_EQ(in_b, names.size()) << b;
  for (const std::string& n : names)
    EXPECT_TRUE(read_file(a + "/" + n) == read_file(b + "/" + n)) << n << " differs between " << a << " and " << b;
}

std::string calib_text() { return shared_dir() + "/data/wikitext-2/wiki.valid.tokens"; }

struct QuantCase {
  const char* name;
  std::string (*model)();
  std::vector<int> ranks;  // against one process; SmolLM2's at one count (each rank loads it)
  std::vector<std::string> flags;
};

// Calibrated over the stages: rotation, the prefix (auto: the outlier-token search's rows gathered
// on rank 0; bos) and its KV rows, the weight clip grid, the static activation / KV scale searches
// and block-wise fine-tuning (PrefixQuant), on mixtext (untied) and SmolLM2 (tied) with the int8
// head; CrossQuant's static columns (the maxima per stage, folded into each stage's weights);
// without calibration: round to nearest, the int4 head (tied table on the first stage). One test
// per recipe, each under its own timeout: together they took 92 s idle and ran past 300 s on a
// host loaded to ~12 (three ranks on two cores beside the other tests); alone, under a load of ~9,
// the SmolLM2 calibration at 2 and 3 ranks took 169 s.
const std::vector<QuantCase>& quant_cases() {
  static const std::vector<QuantCase> cases = {
      {"pq_mixtext", &mixtext, {2, 3}, {"--preset", "prefixquant-w4a4kv4", "--calib", calib_text(), "--calib-samples", "3",
                                "--calib-len", "48", "--finetune", "blockwise", "--finetune-epochs", "1"}},
      {"pq_smollm2", &smollm2, {3}, {"--preset", "w8a8kv8-static", "--rotate", "--prefix", "bos", "--head-bits", "8",
                                "--calib", calib_text(), "--calib-samples", "1", "--calib-len", "16"}},
      {"cross_mixtext", &mixtext, {2, 3}, {"--preset", "w8a8", "--a-quant", "cross", "--a-cross-cols", "static", "--calib",
                                   calib_text(), "--calib-samples", "2", "--calib-len", "32"}},
      {"rtn_smollm2", &smollm2, {2}, {"--preset", "w4a8kv4", "--head-bits", "4"}},
  };
  return cases;
}

class MpirunQuantize : public ::testing::TestWithParam<size_t> {};

TEST_P(MpirunQuantize, WritesTheSameArtifactAsOneProcess) {
  SKIP_WITHOUT_MPI();
  const QuantCase& c = quant_cases()[GetParam()];
  testing::TempDir tmp;
  auto args = [&](const std::string& out) {
    std::vector<std::string> a = {"quantize", "-m", c.model(), "-o", out, "--threads", "1"};
    a.insert(a.end(), c.flags.begin(), c.flags.end());
    return a;
  };
  const std::string one = tmp.file(std::string(c.name) + "-1");
  const JobRun r1 = run(0, args(one));
  ASSERT_EQ(r1.rc, 0) << r1.err;
  for (int np : c.ranks) {
    const std::string out = tmp.file(std::string(c.name) + "-" + std::to_string(np));
    const JobRun r = run(np, args(out));
    ASSERT_EQ(r.rc, 0) << c.name << " -np " << np << ": " << r.err;
    expect_same_files(one, out);
  }
}

INSTANTIATE_TEST_SUITE_P(Recipes, MpirunQuantize, ::testing::Range(size_t(0), quant_cases().size()),
                         [](const ::testing::TestParamInfo<size_t>& i) {
                           return std::string(quant_cases()[i.param].name);
                         });

TEST(Mpirun, SimulatedRecipeOverStagesAndRefusals) {
  SKIP_WITHOUT_MPI();
  testing::TempDir tmp;
  // The first recipe simulated over the stages: the same perplexity as in one process.
  std::vector<std::string> sim = ppl_args(mixtext(), 64, 3);
  sim.insert(sim.end(), quant_cases()[0].flags.begin(), quant_cases()[0].flags.end());
  const std::string want = ppl_figures(run(0, sim));
  ASSERT_EQ(want.rfind("no JSON", 0), std::string::npos) << want;
  EXPECT_EQ(ppl_figures(run(2, sim)), want);
  // What needs the whole model at once is refused, naming the flag.
  const JobRun r = run(2, {"quantize", "-m", mixtext(), "-o", tmp.file("cal"), "--preset", "w8a8kv8", "--prefix",
                           "bos", "--prefix-train", "1", "--calib", calib_text(), "--calib-samples", "2",
                           "--calib-len", "32"});
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.err.find("--prefix-train is not distributed yet"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(tmp.file("cal")));
}

// The pid of rank `rank` of the running mpirun job whose environment holds SINKQ_TEST_JOB=`job`
// (ctest runs other tests' jobs at the same time: only this one's rank may be signalled).
pid_t find_rank(int rank, const std::string& job) {
  const std::string want = "OMPI_COMM_WORLD_RANK=" + std::to_string(rank), mark = "SINKQ_TEST_JOB=" + job;
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    const std::string name = e.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::error_code ec;
    if (std::filesystem::read_symlink(e.path() / "exe", ec).string() != std::filesystem::canonical(SINKQ_BINARY, ec).string())
      continue;
    std::ifstream env(e.path() / "environ", std::ios::binary);
    const std::string all((std::istreambuf_iterator<char>(env)), std::istreambuf_iterator<char>());
    auto has = [&all](const std::string& v) {
      return all.rfind(v + '\0', 0) == 0 || all.find('\0' + v + '\0') != std::string::npos;
    };
    if (has(want) && has(mark)) return pid_t(std::stoi(name));
  }
  return -1;
}

// Runs a long job, does `to_rank1` to rank 1 once it computes, and expects the job to end with an
// error within `bound` seconds.
void expect_job_ends(int sig, const std::string& env, const std::string& needle, int bound) {
  testing::TempDir tmp;
  // A short text (quick to tokenize: rank 1's first wait stays far below the timeout) of 60+
  // windows, so the job is still running when rank 1 is signalled.
  {
    const std::string text = read_file(shared_dir() + "/data/wikitext-2/wiki.test.tokens");
    std::ofstream(tmp.file("text.txt"), std::ios::binary) << text.substr(0, 150000);
  }
  std::vector<std::string> args = ppl_args(smollm2(), 256, 60);
  args[4] = tmp.file("text.txt");  // -f
  const std::string mark = tmp.path();
  const std::string cmd = "SINKQ_TEST_JOB=" + quote(mark) + " " + env + " " + mpi_prefix(2) + sinkq_cmd(args) + " >" +
                          tmp.file("out") + " 2>" + tmp.file("err") + " </dev/null";
  const pid_t job = fork();
  ASSERT_GE(job, 0);
  if (job == 0) {
    setpgid(0, 0);
    execl("/bin/sh", "sh", "-c", cmd.c_str(), nullptr);
    _exit(127);
  }
  pid_t victim = -1;
  const auto t0 = std::chrono::steady_clock::now();
  while (victim < 0 && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(60)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    // once its first window has started: rank 0 printed progress
    if (read_file(tmp.file("err")).find("ppl: window 1/") != std::string::npos) victim = find_rank(1, mark);
  }
  ASSERT_GT(victim, 0) << "rank 1 not found: " << read_file(tmp.file("err"));
  kill(victim, sig);
  int st = 0;
  pid_t done = 0;
  const auto t1 = std::chrono::steady_clock::now();
  while ((done = waitpid(job, &st, WNOHANG)) == 0 && std::chrono::steady_clock::now() - t1 < std::chrono::seconds(bound))
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  if (done == 0) {
    kill(-job, SIGKILL);
    kill(victim, SIGKILL);
    waitpid(job, &st, 0);
    FAIL() << "the job did not end within " << bound << " s after rank 1 got signal " << sig;
  }
  if (sig == SIGSTOP) kill(victim, SIGKILL);
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) != 0) << "status " << st;
  EXPECT_NE(read_file(tmp.file("err")).find(needle), std::string::npos) << read_file(tmp.file("err"));
}

TEST(Mpirun, ARankThatDiesOrHangsEndsTheJob) {
  SKIP_WITHOUT_MPI();
  // Killed: mpirun sees it and ends the job.
  expect_job_ends(SIGKILL, "", "", 60);
  // Stopped (a hang): rank 0's wait for it times out (SINKQ_MPI_TIMEOUT) and aborts every rank.
  expect_job_ends(SIGSTOP, "SINKQ_MPI_TIMEOUT=10", "no answer from rank 1 for 10 s", 60);
}

}  // namespace
}  // namespace sinkq
