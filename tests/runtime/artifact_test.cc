// The sinkq artifact (src/runtime/artifact.h): a written and re-loaded artifact runs exactly the
// in-memory QuantizedModel (logits bit for bit), the same model gives byte-identical files, a
// failure mid-write leaves nothing behind, and corrupted artifacts give errors naming the file
// and the field or tensor.
#include "runtime/artifact.h"

#include <gmock/gmock.h>
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "core/checksum.h"
#include "core/mmap.h"
#include "io/safetensors.h"
#include "quant/rotate.h"
#include "quant/sim.h"
#include "runtime/runtime_models.h"
#include "util/model_testutil.h"
#include "util/testutil.h"

namespace sinkq::runtime {
namespace {

using testing::prompt;
using testing::bit_equal;

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using nlohmann::json;
using testing::error_of;

std::string model_dir(const char* name) { return testmodels::shared_model_dir(name); }
std::shared_ptr<const Model> load(const char* name) { return testmodels::shared_model(name); }
// Qwen2 with biases, untied, stories260K's tokenizer linked in (runtime_models.h).
const std::string& tiny_dir() { return testmodels::tiny_qwen2_dir(); }

constexpr int kTokens = 40;

std::vector<float> logits(const QuantizedModel& qm, const std::vector<int32_t>& toks) {
  Forward f(qm.model, kTokens);
  qm.attach(f);
  const auto l = f.step(toks, true);
  return {l.begin(), l.end()};
}

QuantizedModel quantize(std::shared_ptr<const Model> base, quant::Recipe c, std::optional<DType> fp = {}) {
  const std::vector<std::vector<int32_t>> calib = {prompt(24, 1), prompt(24, 2)};
  c.calib.weight_rows = 16;
  const quant::SimModel sim = quant::build_sim(base, c, c.needs_calibration() ? calib : decltype(calib){});
  QuantizeOptions o;
  o.fp_dtype = fp;
  return build_quantized(sim, o);
}
quant::Recipe config(const char* preset, bool rotate = false) {
  quant::Recipe c = quant::Recipe::from_preset(preset);
  c.rotate.on = rotate;
  c.rotate.seed = 11;
  return c;
}

std::map<std::string, std::string> dir_bytes(const std::string& dir) {
  std::map<std::string, std::string> m;
  for (const auto& e : fs::directory_iterator(dir)) m[e.path().filename().string()] = read_file(e.path().string());
  return m;
}
// Everything in `parent` whose name starts with `stem` (leftovers of a failed write).
std::vector<std::string> entries(const std::string& parent) {
  std::vector<std::string> v;
  for (const auto& e : fs::directory_iterator(parent)) v.push_back(e.path().filename().string());
  std::sort(v.begin(), v.end());
  return v;
}

TEST(Artifact, RoundTripIsBitExact) {
  struct Case {
    const char* name;
    std::string dir;
    quant::Recipe cfg;
    std::optional<DType> fp;
    bool prefix;
  };
  quant::Recipe g32asym = config("w8a8");
  g32asym.w.bits = 4;
  g32asym.w.group = 32;
  g32asym.w.symmetric = false;
  quant::Recipe a4static = config("w8a8", true);
  a4static.w.bits = 4;
  a4static.w.clip_grid = true;
  a4static.a.bits = 4;
  a4static.a.mode = quant::ActMode::Static;
  quant::Recipe kv4 = config("w4a8kv4", true);
  quant::Recipe kv8s = config("w8a8kv8");
  kv8s.a.mode = quant::ActMode::Static;
  kv8s.kv.mode = quant::KvMode::Static;
  kv8s.kv.symmetric = false;
  quant::Recipe g128 = config("w8a8", true);
  g128.w.bits = 4;
  g128.w.group = 128;
  // Mixed precision (recipe.h weight rules): down_proj of the first and last layer at 8 bits,
  // q_proj in asymmetric groups of 128, over W4 g32 sym.
  quant::Recipe mixed = config("w8a8", true);
  mixed.w.bits = 4;
  mixed.w.group = 32;
  quant::WeightRule down8, q128;
  down8.layers = {0, -1};
  down8.roles = 1u << int(LinearRole::Down);
  down8.bits = 8;
  down8.group = 0;
  q128.roles = 1u << int(LinearRole::Q);
  q128.group = 128;
  q128.symmetric = false;
  mixed.weight_rules = {down8, q128};
  // KVQuant's codebook KV (channel keys before RoPE, 1% outliers) under rotation, and token keys
  // after RoPE with channel values.
  quant::Recipe nuq3 = config("w4a8", true);
  nuq3.kv.bits = 3;
  nuq3.kv.codebook = quant::KvCodebook::Fisher;
  nuq3.kv.outliers = 0.01;
  quant::Recipe nf2 = config("w8a8");
  nf2.kv.bits = 2;
  nf2.kv.codebook = quant::KvCodebook::Nf;
  nf2.kv.key_pre_rope = false;
  nf2.kv.key_axis = quant::KvAxis::Token;
  nf2.kv.value_axis = quant::KvAxis::Channel;
  quant::Recipe head4_g128 = config("w8a8-head4");
  head4_g128.head.group = 128;
  const std::vector<Case> cases = {
      {"stories w8a8", model_dir("stories260K"), config("w8a8"), std::nullopt, false},
      {"tiny-qwen2 mixed precision rotated", tiny_dir(), mixed, std::nullopt, false},
      {"stories w8a8 f16 + prefix", model_dir("stories260K"), config("w8a8"), DType::F16, true},
      {"stories w4a4 static rotated bf16", model_dir("stories260K"), a4static, DType::BF16, false},
      {"tiny-qwen2 w4a8 g32 asym", tiny_dir(), g32asym, std::nullopt, false},
      {"stories w4a8kv4 rotated + prefix", model_dir("stories260K"), kv4, std::nullopt, true},
      {"tiny-qwen2 w8a8 static kv8 static asym per-head", tiny_dir(), kv8s, std::nullopt, false},
      {"tiny-qwen2 w4a8 g128 rotated + prefix", tiny_dir(), g128, std::nullopt, true},
      {"stories w4a8 nuq3-1% rotated + prefix", model_dir("stories260K"), nuq3, std::nullopt, true},
      {"tiny-qwen2 w8a8 nf2 post-RoPE token keys, channel values", tiny_dir(), nf2, std::nullopt, false},
      // The int8 head (recipe.h HeadSim): one table when tied, two when untied or rotated.
      {"stories w8a8 head8 tied", model_dir("stories260K"), config("w8a8-head8"), std::nullopt, false},
      {"tiny-qwen2 w4a8kv4 head8 rotated + prefix", tiny_dir(), config("w4a8kv4-head8", true), std::nullopt, true},
      // The int4 head: g32 (tied), and g128 over mixtext's 192 columns (a ragged <base>.tail block).
      {"stories w4a8 head4 tied", model_dir("stories260K"), config("w4a8-head4"), std::nullopt, false},
      {"mixtext w8a8 head4 g128 ragged", model_dir("mixtext-2.5M"), head4_g128, std::nullopt, false},
  };
  const auto toks = prompt(kTokens - 3);
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const auto base = Model::load(c.dir);
    QuantizedModel qm = quantize(base, c.cfg, c.fp);
    if (c.prefix) {
      // A full-precision prefix as the simulator builds it: the rotated fp model with its online
      // rotations (the tokens: [BOS] and two others).
      const auto fp = quant::rotate_model(base, c.cfg.rotate);
      qm.prefix = KvPrefix::compute(fp, {1, 13, 29}, [&](Forward& f) { quant::attach_online_rotation(f, c.cfg.rotate); });
    }
    testing::TempDir tmp;
    const std::string out = tmp.file("art");
    const ArtifactInfo info = write_artifact(qm, c.dir, out);
    EXPECT_TRUE(is_artifact(out));
    EXPECT_GT(info.total_bytes, 0u);
    const QuantizedModel back = load_artifact(out);
    EXPECT_EQ(back.rt.describe(), qm.rt.describe());
    EXPECT_EQ(back.kv.has_value(), c.cfg.kv.on() && !c.cfg.kv.vector());
    EXPECT_EQ(back.kv_codebook.has_value(), c.cfg.kv.vector());
    EXPECT_EQ(back.describe(), qm.describe());
    EXPECT_EQ(back.model->weights().embed.dtype, qm.model->weights().embed.dtype);
    ASSERT_EQ(back.prefix != nullptr, qm.prefix != nullptr);
    if (qm.prefix) {
      EXPECT_EQ(back.prefix->tokens(), qm.prefix->tokens());
      for (int l = 0; l < qm.prefix->num_layers(); ++l) {
        const KvSegment a = qm.prefix->segment(l), b = back.prefix->segment(l);
        const size_t n = size_t(a.rows * qm.prefix->kv_dim()) * sizeof(float);
        EXPECT_EQ(std::memcmp(a.k, b.k, n), 0) << "layer " << l;
        EXPECT_EQ(std::memcmp(a.v, b.v, n), 0) << "layer " << l;
      }
    }
    EXPECT_TRUE(bit_equal(logits(back, toks), logits(qm, toks)));
    // The tokenizer and config came along; the recipe states what was done.
    EXPECT_TRUE(fs::exists(out + "/config.json"));
    EXPECT_EQ(read_file(out + "/config.json"), read_file(c.dir + "/config.json"));
    EXPECT_TRUE(fs::exists(out + "/tokenizer.json") || fs::exists(out + "/tokenizer.model"));
    const json r = json::parse(read_file(out + "/sinkq_recipe.json"));
    EXPECT_EQ(r.at("format_version"), kArtifactFormatVersion);
    EXPECT_EQ(r.at("recipe").at("rotation").at("on"), c.cfg.rotate.on);
    EXPECT_EQ(r.at("config_checksum"), checksum(read_file(c.dir + "/config.json")));
    EXPECT_TRUE(r.at("recipe").contains("weights"));
    EXPECT_EQ(r.at("tensors").size(), SafetensorsFile::open(out + "/model.safetensors", true)->tensors().size());
    const ModelWeights& bw = back.model->weights();
    EXPECT_EQ(bw.lm_head_impl != nullptr, c.cfg.head.on());
    EXPECT_EQ(bw.tied(), qm.model->weights().tied());
    if (c.cfg.head.on()) {  // the tables alone, no fp copy
      EXPECT_EQ(r.at("fp_dtype"), fmt::format("int{}", c.cfg.head.bits));
      EXPECT_TRUE(r.at("tensors").contains("lm_head.codes"));
      const int64_t H = back.model->config().hidden_size, G = c.cfg.head.group;
      EXPECT_EQ(r.at("tensors").contains("lm_head.tail.codes"), G > 0 && G < H && H % G != 0);
      EXPECT_FALSE(r.at("tensors").contains("model.embed_tokens.weight"));
      EXPECT_FALSE(r.at("tensors").contains("lm_head.weight"));
      EXPECT_EQ(r.at("tensors").contains("model.embed_tokens.codes"), !bw.tied());
    }
  }
}

TEST(Artifact, DeterministicBytes) {
  const QuantizedModel qm = quantize(load("stories260K"), config("w8a8", true), DType::F16);
  testing::TempDir tmp;
  write_artifact(qm, model_dir("stories260K"), tmp.file("a"));
  write_artifact(qm, model_dir("stories260K"), tmp.file("b"));
  // And from a second, independent quantization of the same inputs and seed.
  write_artifact(quantize(load("stories260K"), config("w8a8", true), DType::F16), model_dir("stories260K"),
                 tmp.file("c"));
  const auto a = dir_bytes(tmp.file("a"));
  EXPECT_TRUE(a == dir_bytes(tmp.file("b")));
  EXPECT_TRUE(a == dir_bytes(tmp.file("c")));
  EXPECT_TRUE(a.count("model.safetensors") && a.count("sinkq_recipe.json") && a.count("tokenizer.json"));
}

TEST(Artifact, AtomicWrites) {
  const QuantizedModel qm = quantize(load("stories260K"), config("w8a8"));
  const std::string src = model_dir("stories260K");
  testing::TempDir tmp;
  const std::string out = tmp.file("art");
  // A failure after the tensors were written: nothing is left.
  for (const char* at : {"model.safetensors", "sinkq_recipe.json", "tokenizer.json"}) {
    WriteOptions o;
    o.before_file = [&](const std::string& f) {
      if (f == at) throw Error(fmt::format("injected failure before {}", f));
    };
    EXPECT_THAT(error_of([&] { write_artifact(qm, src, out, o); }), HasSubstr("injected failure"));
    EXPECT_EQ(entries(tmp.path()), std::vector<std::string>{}) << at;
  }
  // A parent that does not exist.
  EXPECT_THAT(error_of([&] { write_artifact(qm, src, tmp.file("no/such/dir")); }),
              HasSubstr("its parent directory"));
  // Existing output: refused; --force replaces it atomically and leaves nothing else.
  write_artifact(qm, src, out);
  const auto before = dir_bytes(out);
  EXPECT_THAT(error_of([&] { write_artifact(qm, src, out); }),
              HasSubstr("already exists: refusing to overwrite it (use --force"));
  WriteOptions force;
  force.force = true;
  force.before_file = [&](const std::string& f) {
    if (f == "sinkq_recipe.json") throw Error("injected");
  };
  EXPECT_THAT(error_of([&] { write_artifact(qm, src, out, force); }), HasSubstr("injected"));
  EXPECT_TRUE(dir_bytes(out) == before);  // a failed --force keeps the old artifact
  force.before_file = nullptr;
  const QuantizedModel other = quantize(load("stories260K"), config("w8a8", true));
  write_artifact(other, src, out + "/", force);
  EXPECT_EQ(entries(tmp.path()), std::vector<std::string>{"art"});
  EXPECT_FALSE(dir_bytes(out) == before);
  EXPECT_TRUE(load_artifact(out).cfg.rotate.on);
  // The source directory must be the model's.
  EXPECT_THAT(error_of([&] { write_artifact(qm, tiny_dir(), tmp.file("x")); }),
              HasSubstr("is not the source of this quantized model"));
}

// Rewrites an artifact's safetensors file after `edit` (tensors by name, metadata).
struct Tensors {
  std::map<std::string, std::pair<TensorToWrite, std::vector<std::byte>>> t;
  std::map<std::string, std::string> meta;
};
void rewrite(const std::string& dir, const std::function<void(Tensors&)>& edit) {
  const std::string path = dir + "/model.safetensors";
  Tensors ts;
  {
    const auto f = SafetensorsFile::open(path, true);
    ts.meta = f->metadata();
    for (const TensorInfo& i : f->tensors()) {
      auto& [tw, bytes] = ts.t[i.name];
      bytes.assign(i.data, i.data + i.nbytes);
      tw.name = i.name;
      tw.dtype = i.dtype;
      tw.shape = i.shape;
      tw.raw_dtype = i.raw_dtype;
    }
  }
  edit(ts);
  std::vector<TensorToWrite> v;
  for (auto& [n, p] : ts.t) {
    p.first.bytes = std::span<const std::byte>(p.second.data(), p.second.size());
    v.push_back(p.first);
  }
  write_safetensors(path, v, ts.meta);
}
void edit_recipe(const std::string& dir, const std::function<void(json&)>& edit) {
  json r = json::parse(read_file(dir + "/sinkq_recipe.json"));
  edit(r);
  write_file_atomic(dir + "/sinkq_recipe.json", r.dump(2));
}

TEST(Artifact, CorruptionIsACleanError) {
  const QuantizedModel qm = quantize(load("stories260K"), config("w8a8"));
  testing::TempDir tmp;
  int n = 0;
  // A fresh artifact, corrupted by `edit`, then loaded: the error message.
  auto err = [&](const std::function<void(const std::string&)>& edit) {
    const std::string d = tmp.file(fmt::format("a{}", n++));
    write_artifact(qm, model_dir("stories260K"), d);
    edit(d);
    return error_of([&] { load_artifact(d); });
  };
  const std::string q = "model.layers.0.self_attn.q_proj";
  EXPECT_THAT(err([](const std::string& d) { edit_recipe(d, [](json& r) { r.erase("recipe"); }); }),
              HasSubstr("sinkq_recipe.json: field 'recipe': missing"));
  EXPECT_THAT(err([](const std::string& d) { edit_recipe(d, [](json& r) { r["recipe"]["weights"]["bits"] = "8"; }); }),
              HasSubstr("sinkq_recipe.json: field 'recipe.weights.bits': must be an integer"));
  EXPECT_THAT(err([](const std::string& d) { edit_recipe(d, [](json& r) { r["recipe"]["weights"]["bits"] = 3; }); }),
              HasSubstr("sinkq_recipe.json: field 'recipe': 3-bit weights cannot run"));
  EXPECT_THAT(err([](const std::string& d) { edit_recipe(d, [](json& r) { r["format_version"] = 1; }); }),
              HasSubstr("field 'format_version': 1 is not supported (this sinkq reads version 3): written by an older sinkq"));
  // A recipe field dropped by hand is not a silent default: the recipe must read back to itself.
  EXPECT_THAT(err([](const std::string& d) { edit_recipe(d, [](json& r) { r["recipe"]["weights"].erase("symmetric"); }); }),
              HasSubstr("field 'recipe.weights.symmetric': not as this recipe writes it"));
  EXPECT_THAT(err([](const std::string& d) { edit_recipe(d, [](json& r) { r["recipe"]["weights"]["bitz"] = 8; }); }),
              HasSubstr("field 'recipe.weights.bitz': unknown key"));
  // Flipping what the packed tensors were made with is caught by the tensors' layout.
  EXPECT_THAT(err([](const std::string& d) { edit_recipe(d, [](json& r) { r["recipe"]["weights"]["bits"] = 4; }); }),
              HasSubstr("does not match the recipe's weights"));
  EXPECT_THAT(err([](const std::string& d) { write_file_atomic(d + "/sinkq_recipe.json", "{"); }),
              HasSubstr("sinkq_recipe.json: not valid JSON"));
  // Tensors and metadata.
  EXPECT_THAT(err([&](const std::string& d) {
                rewrite(d, [&](Tensors& t) { t.meta[q] = R"({"shape":[64,64],"blocks":[[0,64,77]]})"; });
              }),
              HasSubstr("model.safetensors: __metadata__ '" + q + "': block 0: unknown packed format value 77"));
  EXPECT_THAT(err([&](const std::string& d) {
                rewrite(d, [&](Tensors& t) { t.meta[q] = R"({"shape":[64,64],"blocks":[[0,64,2]]})"; });
              }),
              HasSubstr("does not match the recipe's weights"));
  EXPECT_THAT(err([&](const std::string& d) {
                rewrite(d, [&](Tensors& t) {
                  auto& s = t.t.at(q + ".scales");
                  s.first.shape = {32, 2};
                });
              }),
              HasSubstr("tensor '" + q + ".scales' has shape [32, 2], expected [64, 1]"));
  EXPECT_THAT(err([&](const std::string& d) {
                rewrite(d, [&](Tensors& t) {
                  const float nan = std::numeric_limits<float>::quiet_NaN();
                  std::memcpy(t.t.at(q + ".scales").second.data() + 8, &nan, 4);
                });
              }),
              HasSubstr("tensor '" + q + ".scales': entry 2 = nan is not a positive normal fp32 scale"));
  EXPECT_THAT(err([&](const std::string& d) { rewrite(d, [&](Tensors& t) { t.t.erase(q + ".codes"); }); }),
              HasSubstr("model.safetensors: missing tensor '" + q + ".codes'"));
  EXPECT_THAT(err([&](const std::string& d) {
                rewrite(d, [&](Tensors& t) {
                  auto& c = t.t.at(q + ".codes");
                  c.first.raw_dtype = "I8";
                });
              }),
              HasSubstr("tensor '" + q + ".codes' has dtype I8, expected U8"));
  EXPECT_THAT(err([&](const std::string& d) {
                rewrite(d, [&](Tensors& t) {
                  auto e = t.t.at("model.norm.weight");
                  e.first.name = "model.extra";
                  t.t.emplace("model.extra", e);
                });
              }),
              HasSubstr("unexpected tensor 'model.extra'"));
  EXPECT_THAT(err([&](const std::string& d) { rewrite(d, [&](Tensors& t) { t.meta.erase("format"); }); }),
              HasSubstr("__metadata__ lacks \"format\": \"sinkq-artifact\""));
  EXPECT_THAT(err([](const std::string& d) { fs::remove(d + "/config.json"); }), HasSubstr("config.json"));
  EXPECT_THAT(error_of([&] { load_artifact(model_dir("stories260K")); }), HasSubstr("is not a sinkq artifact"));
}

// Edits that keep every structural check valid (issue 18's hostile campaign ran them all): the
// checksums catch them, each with a message naming the file and the tensor or field.
TEST(Artifact, ChecksumsCatchWhatTheStructureAllows) {
  const QuantizedModel qm = quantize(load("stories260K"), config("w8a8"), DType::F16);
  testing::TempDir tmp;
  int n = 0;
  auto err = [&](const std::function<void(const std::string&)>& edit) {
    const std::string d = tmp.file(fmt::format("a{}", n++));
    write_artifact(qm, model_dir("stories260K"), d);
    EXPECT_NO_THROW(load_artifact(d));  // loads before the edit
    edit(d);
    return error_of([&] { load_artifact(d); });
  };
  // The recipe rewritten consistently (it reads back to itself, the layouts are unchanged): the
  // rotation switched on, the activations at 4 bits. Both ran before, with garbage results.
  for (const auto& change : std::vector<std::function<void(quant::Recipe&)>>{
           [](quant::Recipe& c) { c.rotate.on = true; }, [](quant::Recipe& c) { c.a.bits = 4; }}) {
    EXPECT_THAT(err([&](const std::string& d) {
                  edit_recipe(d, [&](json& r) {
                    quant::Recipe c = quant::Recipe::from_json(r["recipe"], "test");
                    change(c);
                    r["recipe"] = c.to_json();
                  });
                }),
                AllOf(HasSubstr("sinkq_recipe.json: not the recipe"), HasSubstr("edited after quantize")));
  }
  EXPECT_THAT(err([](const std::string& d) { edit_recipe(d, [](json& r) { r["tensors"] = json::object(); }); }),
              HasSubstr("field 'tensors': does not list"));
  EXPECT_THAT(err([](const std::string& d) { edit_recipe(d, [](json& r) { r["fp_dtype"] = "BF16"; }); }),
              HasSubstr("field 'fp_dtype': 'BF16', but model.embed_tokens.weight is F16"));
  EXPECT_THAT(err([](const std::string& d) { edit_recipe(d, [](json& r) { r["format_version"] = 2; }); }),
              HasSubstr("written by an older sinkq"));
  // The f16 embeddings relabelled bf16 in the header (the bytes then read as garbage), with and
  // without the inventory edited to match: the checksum is seeded by dtype and shape.
  const std::string e = "model.embed_tokens.weight";
  EXPECT_THAT(err([&](const std::string& d) { rewrite(d, [&](Tensors& t) { t.t.at(e).first.dtype = DType::BF16; }); }),
              HasSubstr("field 'fp_dtype': 'F16', but model.embed_tokens.weight is BF16"));
  EXPECT_THAT(err([&](const std::string& d) {
                rewrite(d, [&](Tensors& t) { t.t.at(e).first.dtype = DType::BF16; });
                edit_recipe(d, [&](json& r) { r["fp_dtype"] = "BF16"; });
              }),
              AllOf(HasSubstr("field 'tensors." + e + "': lists F16 [512,64]"), HasSubstr("is BF16 [512, 64]")));
  EXPECT_THAT(err([&](const std::string& d) {
                rewrite(d, [&](Tensors& t) { t.t.at(e).first.dtype = DType::BF16; });
                edit_recipe(d, [&](json& r) {
                  r["tensors"][e]["dtype"] = "BF16";
                  r["fp_dtype"] = "BF16";
                });
              }),
              AllOf(HasSubstr("tensor '" + e + "': checksum"), HasSubstr("corrupted or was edited")));
  // One flipped bit in a packed code, in a norm; config.json edited.
  const std::string q = "model.layers.1.mlp.down_proj.codes";
  EXPECT_THAT(err([&](const std::string& d) { rewrite(d, [&](Tensors& t) { t.t.at(q).second[17] ^= std::byte{4}; }); }),
              HasSubstr("model.safetensors: tensor '" + q + "': checksum"));
  EXPECT_THAT(err([&](const std::string& d) {
                rewrite(d, [&](Tensors& t) { t.t.at("model.norm.weight").second[0] ^= std::byte{1}; });
              }),
              HasSubstr("tensor 'model.norm.weight': checksum"));
  EXPECT_THAT(err([](const std::string& d) {
                json c = json::parse(read_file(d + "/config.json"));
                c["rope_theta"] = 20000.0;
                write_file_atomic(d + "/config.json", c.dump());
              }),
              AllOf(HasSubstr("config.json: changed after quantize"), HasSubstr("sinkq_recipe.json records")));
  EXPECT_THAT(err([&](const std::string& d) { rewrite(d, [&](Tensors& t) { t.meta.erase("recipe_checksum"); }); }),
              HasSubstr("__metadata__ lacks \"recipe_checksum\""));
  // The tokenizer and generation files (an edited vocabulary loaded and answered wrongly, exit 0):
  // two tokens' ids swapped; a file quantize did not write (the tokenizer would read it); one it
  // wrote, gone; the record itself dropped (recipe_checksum binds it) or rewritten to match.
  auto edit_vocab = [](const std::string& d) {
    json t = json::parse(read_file(d + "/tokenizer.json"));
    json& v = t["model"]["vocab"];
    auto a = v.begin(), b = std::next(a);  // two tokens' ids swapped
    std::swap(*a, *b);
    write_file_atomic(d + "/tokenizer.json", t.dump());
  };
  EXPECT_THAT(err(edit_vocab), AllOf(HasSubstr("tokenizer.json: changed after quantize"),
                                     HasSubstr("the tokenizer would encode and decode differently")));
  EXPECT_THAT(err([](const std::string& d) { write_file_atomic(d + "/vocab.json", "{}"); }),
              AllOf(HasSubstr("vocab.json: not written by quantize"), HasSubstr("remove it")));
  EXPECT_THAT(err([](const std::string& d) { fs::remove(d + "/tokenizer.model"); }),
              AllOf(HasSubstr("tokenizer.model: missing ("), HasSubstr("sinkq_recipe.json records it)")));
  EXPECT_THAT(err([](const std::string& d) { edit_recipe(d, [](json& r) { r.erase("files"); }); }),
              HasSubstr("sinkq_recipe.json: not the recipe"));
  EXPECT_THAT(err([&](const std::string& d) {
                edit_vocab(d);
                edit_recipe(d, [&](json& r) { r["files"]["tokenizer.json"] = checksum(read_file(d + "/tokenizer.json")); });
              }),
              HasSubstr("sinkq_recipe.json: not the recipe"));
}

// Sizes against the fp16 model (parameters · 2 bytes), printed for the report; the W4 target
// (≤ 0.3× fp16) is a benchmark figure for realistic models, where embeddings are a small part.
TEST(Artifact, SizesAgainstFp16) {
  for (const char* name : {"stories260K", "mixtext-2.5M"}) {
    const auto base = load(name);
    const double fp16 = 2.0 * double(base->weights().parameter_count(base->config()));
    for (const char* preset : {"w8a8", "w4a8"}) {
      quant::Recipe c = config("w8a8");
      if (std::string(preset) == "w4a8") c.w.bits = 4;
      for (std::optional<DType> fp : {std::optional<DType>{}, std::optional<DType>{DType::F16}}) {
        testing::TempDir tmp;
        const QuantizedModel qm = quantize(base, c, fp);
        write_artifact(qm, model_dir(name), tmp.file("a"));
        const double st = double(fs::file_size(tmp.file("a/model.safetensors")));
        uint64_t all = 0;
        for (const auto& e : fs::directory_iterator(tmp.file("a"))) all += e.file_size();
        std::printf("  %-13s %s embeddings %-4s: model.safetensors %7.0f KiB = %.3f x fp16 (%.0f KiB); whole dir "
                    "%.0f KiB\n", name, preset, fp ? "f16" : "f32", st / 1024, st / fp16, fp16 / 1024,
                    double(all) / 1024);
        if (std::string(preset) == "w4a8" && fp) {
          EXPECT_LT(st / fp16, 0.5);
        }
      }
    }
  }
}

}  // namespace
}  // namespace sinkq::runtime

namespace sinkq::runtime {
namespace {

// The artifact of every family (tests/data/families): its norms and biases written and read by
// the layer schema under the family's own names (Gemma's post-norms, q/k norms), the config's
// per-layer windows, soft-caps and RoPE bases back from config.json: the same logits bit for bit.
TEST(Artifact, EveryFamilyRoundTrips) {
  for (const char* family : {"llama3", "mistral", "qwen2", "qwen3", "gemma2", "gemma3", "phi3"}) {
    SCOPED_TRACE(family);
    const std::string dir = std::string(SINKQ_SOURCE_DIR) + "/tests/data/families/" + family;
    const auto base = Model::load(dir);
    quant::Recipe c = config("w4a8kv4", !base->config().spec().post_norms);
    c.w.group = 32;
    const QuantizedModel qm = quantize(base, c);
    testing::TempDir tmp;
    const std::string out = tmp.file("art");
    write_artifact(qm, dir, out);
    const QuantizedModel back = load_artifact(out);
    EXPECT_EQ(back.model->config(), base->config());
    std::vector<int32_t> toks;
    for (int i = 0; i < 30; ++i) toks.push_back(int32_t(1 + (i * 37) % 95));
    EXPECT_TRUE(bit_equal(logits(back, toks), logits(qm, toks)));
  }
}

}  // namespace
}  // namespace sinkq::runtime
