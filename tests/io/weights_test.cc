// tests/io/weights_test.cc — tiny random models and the real ones through ModelFiles::load.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <tuple>

#include "core/error.h"
#include "core/mmap.h"
#include "io/weights.h"
#include "util/testutil.h"

namespace sinkq {
namespace {

using sinkq::testing::error_of;
using ::testing::AllOf;
using ::testing::HasSubstr;
using sinkq::testing::TempDir;
using sinkq::testing::TinyModelSpec;
using sinkq::testing::TinyTensor;
using json = nlohmann::json;

// Mat: name, dtype, shape and bytes equal what write_tiny_model wrote.
void expect_mat(const Mat& m, const std::map<std::string, TinyTensor>& want, const std::string& name) {
  SCOPED_TRACE(name);
  ASSERT_FALSE(m.empty());
  EXPECT_EQ(m.name, name);
  const TinyTensor& t = want.at(name);
  EXPECT_EQ(m.dtype, t.dtype);
  EXPECT_EQ((std::vector<int64_t>{m.rows, m.cols}), t.shape);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(m.data) % dtype_size(m.dtype), 0u);
  EXPECT_EQ(std::memcmp(m.data, t.bytes.data(), t.bytes.size()), 0);
}

// fp32 vector widened from what was written.
void expect_vec(const float* v, const std::map<std::string, TinyTensor>& want, const std::string& name) {
  SCOPED_TRACE(name);
  ASSERT_NE(v, nullptr);
  const TinyTensor& t = want.at(name);
  ASSERT_EQ(t.shape.size(), 1u);
  std::vector<float> w(size_t(t.shape[0]));
  to_f32(t.dtype, t.bytes.data(), w.data(), w.size());
  EXPECT_EQ(std::vector<float>(v, v + w.size()), w);
}

int64_t expected_params(const TinyModelSpec& s) {
  const int64_t hd = s.head_dim ? s.head_dim : s.hidden / s.heads, h = s.hidden, f = s.intermediate;
  const int64_t q = s.heads * hd, kv = s.kv_heads * hd;
  const bool bias = s.architecture == "Qwen2ForCausalLM" || (s.architecture == "LlamaForCausalLM" && s.qkv_bias);
  const int64_t layer = 2 * h + 2 * q * h + 2 * kv * h + 3 * f * h + (bias ? q + 2 * kv : 0);
  return s.vocab * h * (s.tied ? 1 : 2) + s.layers * layer + h;
}

// Loads spec's model and checks every role against the written tensors.
void check_roundtrip(const TinyModelSpec& s) {
  TempDir d;
  sinkq::testing::write_tiny_model(d.path(), s);
  const auto want = sinkq::testing::tiny_model_tensors(s);
  ModelFiles mf = ModelFiles::load(d.path());
  const ModelConfig& c = mf.config;
  const ModelWeights& w = mf.weights;
  EXPECT_EQ(mf.dir, d.path());
  EXPECT_EQ(c.tie_word_embeddings, s.tied);
  EXPECT_EQ(w.store.files().size(), size_t(s.shards));
  expect_mat(w.embed, want, "model.embed_tokens.weight");
  ASSERT_EQ(w.layers.size(), size_t(s.layers));
  for (int i = 0; i < s.layers; ++i) {
    const LayerWeights& L = w.layers[size_t(i)];
    const std::string p = fmt::format("model.layers.{}.", i);
    expect_vec(L.vec(VecRole::AttnNorm), want, p + "input_layernorm.weight");
    expect_vec(L.vec(VecRole::MlpNorm), want, p + "post_attention_layernorm.weight");
    expect_mat(L.mat(LinearRole::Q), want, p + "self_attn.q_proj.weight");
    expect_mat(L.mat(LinearRole::K), want, p + "self_attn.k_proj.weight");
    expect_mat(L.mat(LinearRole::V), want, p + "self_attn.v_proj.weight");
    expect_mat(L.mat(LinearRole::O), want, p + "self_attn.o_proj.weight");
    expect_mat(L.mat(LinearRole::Gate), want, p + "mlp.gate_proj.weight");
    expect_mat(L.mat(LinearRole::Up), want, p + "mlp.up_proj.weight");
    expect_mat(L.mat(LinearRole::Down), want, p + "mlp.down_proj.weight");
    EXPECT_EQ(L.mat(LinearRole::Q).rows, c.q_dim());
    EXPECT_EQ(L.mat(LinearRole::K).rows, c.kv_dim());
    EXPECT_EQ(L.mat(LinearRole::O).cols, c.q_dim());
    if (c.qkv_bias) {
      expect_vec(L.vec(VecRole::QBias), want, p + "self_attn.q_proj.bias");
      expect_vec(L.vec(VecRole::KBias), want, p + "self_attn.k_proj.bias");
      expect_vec(L.vec(VecRole::VBias), want, p + "self_attn.v_proj.bias");
    } else {
      EXPECT_EQ(L.vec(VecRole::QBias), nullptr);
      EXPECT_EQ(L.vec(VecRole::KBias), nullptr);
      EXPECT_EQ(L.vec(VecRole::VBias), nullptr);
    }
  }
  expect_vec(w.final_norm, want, "model.norm.weight");
  if (s.tied) {
    EXPECT_EQ(w.lm_head.data, w.embed.data);
  } else {
    expect_mat(w.lm_head, want, "lm_head.weight");
  }
  EXPECT_EQ(w.parameter_count(c), expected_params(s));
}

// dtype x tied x shards
class TinyModels : public ::testing::TestWithParam<std::tuple<DType, bool, int>> {};

TEST_P(TinyModels, LoadExactly) {
  TinyModelSpec s;
  std::tie(s.dtype, s.tied, s.shards) = GetParam();
  check_roundtrip(s);
}

INSTANTIATE_TEST_SUITE_P(All, TinyModels,
                         ::testing::Combine(::testing::Values(DType::F32, DType::F16, DType::BF16),
                                            ::testing::Bool(), ::testing::Values(1, 3)));

TEST(Weights, Qwen2Biases) {
  TinyModelSpec s;
  s.architecture = "Qwen2ForCausalLM";
  s.dtype = DType::BF16;
  s.tied = true;
  check_roundtrip(s);
}

TEST(Weights, Llama3GqaWithLlama3Scaling) {
  TinyModelSpec s;
  s.hidden = 64, s.heads = 8, s.kv_heads = 2, s.intermediate = 96, s.layers = 3;
  s.rope_theta = 500000.0f;
  s.rope_scaling = {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0},
                    {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 64}};
  s.dtype = DType::BF16;
  s.shards = 2;
  check_roundtrip(s);
  TempDir d;
  sinkq::testing::write_tiny_model(d.path(), s);
  const auto c = ModelConfig::load(d.file("config.json"));
  EXPECT_EQ(c.rope_scaling.type, "llama3");
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 64);
  EXPECT_EQ(c.num_heads / c.num_kv_heads, 4);
}

TEST(Weights, MistralExplicitHeadDimAndLlamaQkvBias) {
  TinyModelSpec s;
  s.architecture = "MistralForCausalLM";
  s.head_dim = 16;  // q_dim 64 != hidden 32
  s.sliding_window = 16;
  check_roundtrip(s);
  TinyModelSpec l;
  l.qkv_bias = true;
  l.dtype = DType::F16;
  check_roundtrip(l);
}

// Writes the tiny model of `s` with its tensors edited by `edit` (and config by `cfg_edit`).
template <class Edit>
std::string load_error(const TinyModelSpec& s, Edit edit, void (*cfg_edit)(json&) = nullptr) {
  TempDir d;
  auto ts = sinkq::testing::tiny_model_tensors(s);
  edit(ts);
  std::vector<TensorToWrite> out;
  for (const auto& [n, t] : ts) out.push_back({n, t.dtype, t.shape, t.bytes});
  write_safetensors(d.file("model.safetensors"), out);
  json c = sinkq::testing::tiny_model_config(s);
  if (cfg_edit) cfg_edit(c);
  write_file_atomic(d.file("config.json"), c.dump());
  return error_of([&] { ModelFiles::load(d.path()); });
}

TEST(Weights, WrongShapeNamesTensorAndBothShapes) {
  TinyModelSpec s;
  const std::string e = load_error(s, [](auto&) {}, [](json& c) { c["intermediate_size"] = 40; });
  EXPECT_THAT(e, AllOf(HasSubstr("model.safetensors"), HasSubstr("'model.layers.0.mlp.gate_proj.weight'"),
                       HasSubstr("shape [48, 32], expected [40, 32]")));
  // A transposed o_proj (q_dim 64 vs hidden 32 with head_dim 16).
  s.head_dim = 16;
  EXPECT_THAT(load_error(s, [](auto& ts) {
                auto& t = ts.at("model.layers.1.self_attn.o_proj.weight");
                std::swap(t.shape[0], t.shape[1]);
              }),
              AllOf(HasSubstr("'model.layers.1.self_attn.o_proj.weight'"), HasSubstr("[64, 32], expected [32, 64]")));
}

TEST(Weights, MissingTensor) {
  TinyModelSpec s;
  EXPECT_THAT(load_error(s, [](auto& ts) { ts.erase("model.layers.1.self_attn.v_proj.weight"); }),
              AllOf(HasSubstr("missing tensor 'model.layers.1.self_attn.v_proj.weight'"), HasSubstr("sinkq-test")));
  s.architecture = "Qwen2ForCausalLM";
  EXPECT_THAT(load_error(s, [](auto& ts) { ts.erase("model.layers.0.self_attn.k_proj.bias"); }),
              HasSubstr("missing tensor 'model.layers.0.self_attn.k_proj.bias'"));
  TinyModelSpec more;  // config says 4 layers, files have 2: refused before any layer is allocated
  EXPECT_THAT(load_error(more, [](auto&) {}, [](json& c) { c["num_hidden_layers"] = 4; }),
              AllOf(HasSubstr("num_hidden_layers 4 needs at least 28 tensors"), HasSubstr("hold 21")));
  // With enough tensors in the files (an extra one of layer 2), the first missing one is named.
  EXPECT_THAT(load_error(more, [](auto& ts) {
                ts["model.layers.2.mlp.down_proj.weight"] = ts.at("model.layers.1.mlp.down_proj.weight");
                for (int k = 0; k < 6; ++k) ts[fmt::format("x.{}", k)] = ts.at("model.norm.weight");
              }, [](json& c) { c["num_hidden_layers"] = 3; }),
              HasSubstr("missing tensor 'model.layers.2.self_attn.q_proj.weight'"));
}

TEST(Weights, ExtraTensors) {
  TinyModelSpec s;
  auto add = [](const std::string& name, std::vector<int64_t> shape) {
    return [name, shape](std::map<std::string, TinyTensor>& ts) {
      TinyTensor t;
      t.shape = shape;
      t.bytes.resize(size_t(shape[0]) * 4);
      ts[name] = t;
    };
  };
  EXPECT_THAT(load_error(s, add("model.layers.0.self_attn.q_norm.weight", {8})),
              AllOf(HasSubstr("does not have"), HasSubstr("'model.layers.0.self_attn.q_norm.weight'")));
  EXPECT_THAT(load_error(s, add("model.layers.0.self_attn.o_proj.bias", {32})),
              AllOf(HasSubstr("'model.layers.0.self_attn.o_proj.bias'"), HasSubstr("o_proj bias is not supported")));
  EXPECT_THAT(load_error(s, add("model.layers.1.mlp.up_proj.bias", {48})),
              AllOf(HasSubstr("'model.layers.1.mlp.up_proj.bias'"), HasSubstr("MLP biases are not supported")));
  EXPECT_THAT(load_error(s, add("model.layers.0.self_attn.q_proj.bias", {32})),
              AllOf(HasSubstr("'model.layers.0.self_attn.q_proj.bias'"), HasSubstr("qkv_bias false")));
  // Old checkpoints' rotary buffers are ignored.
  TempDir d;
  auto ts = sinkq::testing::tiny_model_tensors(s);
  add("model.layers.0.self_attn.rotary_emb.inv_freq", {4})(ts);
  std::vector<TensorToWrite> out;
  for (const auto& [n, t] : ts) out.push_back({n, t.dtype, t.shape, t.bytes});
  write_safetensors(d.file("model.safetensors"), out);
  write_file_atomic(d.file("config.json"), sinkq::testing::tiny_model_config(s).dump());
  EXPECT_EQ(ModelFiles::load(d.path()).weights.layers.size(), 2u);
}

TEST(Weights, TiedAndUntiedLmHead) {
  TinyModelSpec s;
  s.tied = true;  // files without lm_head, config untied
  EXPECT_THAT(load_error(s, [](auto&) {}, [](json& c) { c["tie_word_embeddings"] = false; }),
              AllOf(HasSubstr("tie_word_embeddings false"), HasSubstr("'lm_head.weight'")));
  // Tied config with an lm_head.weight present: accepted, embedding used (HF behaviour).
  TinyModelSpec u;
  TempDir d;
  sinkq::testing::write_tiny_model(d.path(), u);
  json c = sinkq::testing::tiny_model_config(u);
  c["tie_word_embeddings"] = true;
  write_file_atomic(d.file("config.json"), c.dump());
  ModelFiles mf = ModelFiles::load(d.path());
  EXPECT_EQ(mf.weights.lm_head.data, mf.weights.embed.data);
  EXPECT_EQ(mf.weights.lm_head.name, "model.embed_tokens.weight");
}

TEST(Weights, MisalignedTensorsAreCopiedAligned) {
  // A valid file whose tensors all start 2 bytes off a 4-byte boundary: a header length of 4k + 2
  // (padding spaces) puts the data section there (tensors tile it, as the format requires).
  TinyModelSpec s;
  s.layers = 1;
  const auto ts = sinkq::testing::tiny_model_tensors(s);
  json h = json::object();
  std::string data;
  for (const auto& [n, t] : ts) {
    h[n] = {{"dtype", "F32"}, {"shape", t.shape}, {"data_offsets", {data.size(), data.size() + t.bytes.size()}}};
    data.append(reinterpret_cast<const char*>(t.bytes.data()), t.bytes.size());
  }
  TempDir d;
  std::string header = h.dump();
  while (header.size() % 4 != 2) header += ' ';
  write_file_atomic(d.file("model.safetensors"), sinkq::testing::raw_safetensors(header, data));
  write_file_atomic(d.file("config.json"), sinkq::testing::tiny_model_config(s).dump());
  ModelFiles mf = ModelFiles::load(d.path());
  expect_mat(mf.weights.layers[0].mat(LinearRole::Q), ts, "model.layers.0.self_attn.q_proj.weight");
  expect_vec(mf.weights.layers[0].vec(VecRole::AttnNorm), ts, "model.layers.0.input_layernorm.weight");
  expect_mat(mf.weights.lm_head, ts, "lm_head.weight");
}

TEST(Weights, ZeroCopyForAlignedFiles) {
  TinyModelSpec s;
  TempDir d;
  sinkq::testing::write_tiny_model(d.path(), s);
  ModelFiles mf = ModelFiles::load(d.path());
  const TensorInfo& t = mf.weights.store.get("model.layers.0.mlp.down_proj.weight");
  EXPECT_EQ(mf.weights.layers[0].mat(LinearRole::Down).data, static_cast<const void*>(t.data));
  EXPECT_EQ(mf.weights.owned.size(), size_t(2 * s.layers + 1));  // only the norms
  ModelWeights moved = std::move(mf.weights);  // pointers stay valid after a move
  EXPECT_EQ(moved.layers[0].vec(VecRole::AttnNorm), moved.owned.front().data());
}

TEST(ModelFiles, DirectoryErrors) {
  TempDir d;
  EXPECT_THAT(error_of([&] { ModelFiles::load(d.file("nope")); }),
              AllOf(HasSubstr(d.file("nope")), HasSubstr("does not exist")));
  write_file_atomic(d.file("file"), "x");
  EXPECT_THAT(error_of([&] { ModelFiles::load(d.file("file")); }), HasSubstr("is neither a directory nor a GGUF file"));
  EXPECT_THAT(error_of([&] { ModelFiles::load(d.path()); }), AllOf(HasSubstr(d.path()), HasSubstr("no config.json")));
  write_file_atomic(d.file("config.json"), sinkq::testing::tiny_model_config({}).dump());
  EXPECT_THAT(error_of([&] { ModelFiles::load(d.path()); }), HasSubstr("neither model.safetensors"));
  TinyModelSpec g;
  g.architecture = "GPT2LMHeadModel";
  TempDir d2;
  sinkq::testing::write_tiny_model(d2.path(), g);
  EXPECT_THAT(error_of([&] { ModelFiles::load(d2.path()); }),
              AllOf(HasSubstr("unsupported architecture 'GPT2LMHeadModel'"), HasSubstr(d2.file("config.json"))));
}

TEST(TinyModel, WriterLayoutAndDeterminism) {
  TinyModelSpec s;
  s.shards = 3;
  TempDir a, b;
  sinkq::testing::write_tiny_model(a.path(), s);
  sinkq::testing::write_tiny_model(b.path(), s);
  for (const char* f : {"model-00001-of-00003.safetensors", "model-00003-of-00003.safetensors",
                        "model.safetensors.index.json", "config.json"})
    EXPECT_EQ(read_file(a.file(f)), read_file(b.file(f))) << f;
  const json idx = json::parse(read_file(a.file("model.safetensors.index.json")));
  uint64_t total = 0;
  for (const auto& [n, t] : sinkq::testing::tiny_model_tensors(s)) total += t.bytes.size();
  EXPECT_EQ(idx["metadata"]["total_size"], total);
  EXPECT_EQ(idx["weight_map"]["model.embed_tokens.weight"], "model-00001-of-00003.safetensors");
  EXPECT_TRUE(std::filesystem::is_symlink(a.file("tokenizer.model")));
  EXPECT_TRUE(std::filesystem::exists(a.file("tokenizer.json")));
  EXPECT_TRUE(std::filesystem::exists(a.file("tokenizer_config.json")));
  s.seed = 2;
  EXPECT_NE(sinkq::testing::tiny_model_tensors(s).at("lm_head.weight").bytes,
            sinkq::testing::tiny_model_tensors({}).at("lm_head.weight").bytes);
}

// ------------------------------------------------------------------------------- real models

TEST(RealModels, Stories260K) {
  ModelFiles mf = ModelFiles::load(sinkq::testing::shared_dir() + "/models/stories260K");
  EXPECT_EQ(mf.weights.parameter_count(mf.config), 260032);  // its README: 260K parameters
  EXPECT_EQ(mf.weights.layers.size(), 5u);
  EXPECT_EQ(mf.weights.lm_head.data, mf.weights.embed.data);
  EXPECT_EQ(mf.weights.layers[4].mat(LinearRole::K).rows, 32);
  EXPECT_EQ(mf.weights.layers[4].mat(LinearRole::Down).cols, 172);
}

TEST(RealModels, Mixtext) {
  ModelFiles mf = ModelFiles::load(sinkq::testing::shared_dir() + "/models/mixtext-2.5M");
  int64_t in_files = 0;  // independent count: every tensor in the file once (untied)
  for (const TensorInfo* t : mf.weights.store.all()) in_files += t->numel();
  EXPECT_EQ(mf.weights.parameter_count(mf.config), in_files);
  EXPECT_EQ(mf.weights.parameter_count(mf.config), 2558400);  // README: 2.56M
  EXPECT_NE(mf.weights.lm_head.data, mf.weights.embed.data);
  EXPECT_EQ(mf.weights.layers[0].mat(LinearRole::Q).rows, 192);
  EXPECT_EQ(mf.weights.layers[0].mat(LinearRole::K).rows, 64);
  EXPECT_EQ(mf.config.head_dim, 32);
}

}  // namespace
}  // namespace sinkq
