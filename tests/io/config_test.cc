// tests/io/config_test.cc — HF config.json parsing: real configs, defaults, every rejection.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/mmap.h"
#include "io/config.h"
#include "util/testutil.h"

namespace sinkq {
namespace {

using sinkq::testing::error_of;
using ::testing::AllOf;
using ::testing::HasSubstr;
using json = nlohmann::json;

constexpr const char* kSrc = "/models/x/config.json";

// Llama-3.1-8B's config.json (the fields that matter).
json llama31() {
  return json::parse(R"({
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
    "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
    "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256,
    "max_position_embeddings": 131072, "rms_norm_eps": 1e-05, "rope_theta": 500000.0,
    "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    "attention_bias": false, "mlp_bias": false, "tie_word_embeddings": false,
    "bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009], "torch_dtype": "bfloat16"})");
}

// Qwen2-0.5B's config.json.
json qwen2() {
  return json::parse(R"({
    "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_act": "silu",
    "hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 24,
    "num_attention_heads": 14, "num_key_value_heads": 2, "vocab_size": 151936,
    "max_position_embeddings": 131072, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
    "use_sliding_window": false, "sliding_window": 131072, "max_window_layers": 24,
    "tie_word_embeddings": true, "bos_token_id": 151643, "eos_token_id": 151643,
    "torch_dtype": "bfloat16"})");
}

// Mistral-7B-v0.1's config.json.
json mistral() {
  return json::parse(R"({
    "architectures": ["MistralForCausalLM"], "model_type": "mistral", "hidden_act": "silu",
    "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
    "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 32000,
    "max_position_embeddings": 32768, "rms_norm_eps": 1e-05, "rope_theta": 10000.0,
    "sliding_window": 4096, "tie_word_embeddings": false, "bos_token_id": 1, "eos_token_id": 2})");
}

std::string err(const json& j) { return error_of([&] { ModelConfig::from_json(j, kSrc); }); }

TEST(Config, StoriesFromDisk) {
  const auto c = ModelConfig::load(sinkq::testing::shared_dir() + "/models/stories260K/config.json");
  EXPECT_EQ(c.arch, Arch::Llama);
  EXPECT_EQ(c.architecture, "LlamaForCausalLM");
  EXPECT_EQ(c.hidden_size, 64);
  EXPECT_EQ(c.intermediate_size, 172);
  EXPECT_EQ(c.num_layers, 5);
  EXPECT_EQ(c.num_heads, 8);
  EXPECT_EQ(c.num_kv_heads, 4);
  EXPECT_EQ(c.head_dim, 8);
  EXPECT_EQ(c.vocab_size, 512);
  EXPECT_EQ(c.max_position_embeddings, 512);
  EXPECT_FLOAT_EQ(c.rms_norm_eps, 1e-5f);
  EXPECT_EQ(c.rope_theta, 10000.0f);
  EXPECT_EQ(c.rope_scaling.type, "none");
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_FALSE(c.qkv_bias);
  EXPECT_EQ(c.sliding_window, 0);
  EXPECT_EQ(c.bos_token_id, 1);
  EXPECT_EQ(c.eos_token_ids, std::vector<int>{2});
  EXPECT_EQ(c.torch_dtype, "float32");
}

TEST(Config, Llama3RopeScalingAndEosList) {
  const auto c = ModelConfig::from_json(llama31(), kSrc);
  EXPECT_EQ(c.rope_scaling.type, "llama3");
  EXPECT_EQ(c.rope_scaling.factor, 8.0f);
  EXPECT_EQ(c.rope_scaling.low_freq_factor, 1.0f);
  EXPECT_EQ(c.rope_scaling.high_freq_factor, 4.0f);
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 8192);
  EXPECT_EQ(c.rope_theta, 500000.0f);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.q_dim(), 4096);
  EXPECT_EQ(c.kv_dim(), 1024);
  EXPECT_EQ(c.bos_token_id, 128000);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int>{128001, 128008, 128009}));
}

TEST(Config, RopeScalingVariants) {
  json j = llama31();
  j["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};  // old spelling
  auto c = ModelConfig::from_json(j, kSrc);
  EXPECT_EQ(c.rope_scaling.type, "linear");
  EXPECT_EQ(c.rope_scaling.factor, 2.0f);
  j["rope_scaling"] = {{"rope_type", "default"}};
  EXPECT_EQ(ModelConfig::from_json(j, kSrc).rope_scaling.type, "none");
  j["rope_scaling"] = nullptr;
  EXPECT_EQ(ModelConfig::from_json(j, kSrc).rope_scaling.type, "none");
  j.erase("rope_scaling");
  EXPECT_EQ(ModelConfig::from_json(j, kSrc).rope_scaling.type, "none");
  // transformers v5 nests theta and scaling in rope_parameters.
  j.erase("rope_theta");
  j["rope_parameters"] = {{"rope_type", "linear"}, {"factor", 4.0}, {"rope_theta", 250000.0}};
  c = ModelConfig::from_json(j, kSrc);
  EXPECT_EQ(c.rope_theta, 250000.0f);
  EXPECT_EQ(c.rope_scaling.type, "linear");
  j.erase("rope_parameters");
  EXPECT_EQ(ModelConfig::from_json(j, kSrc).rope_theta, 10000.0f);  // HF default
}

TEST(Config, RopeScalingRejections) {
  json j = llama31();
  j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
  EXPECT_THAT(err(j), AllOf(HasSubstr(kSrc), HasSubstr("rope_scaling"), HasSubstr("'yarn'"), HasSubstr("not supported")));
  j["rope_scaling"] = llama31()["rope_scaling"];
  j["rope_scaling"].erase("low_freq_factor");
  EXPECT_THAT(err(j), AllOf(HasSubstr(kSrc), HasSubstr("'rope_scaling.low_freq_factor' is missing")));
  j["rope_scaling"] = llama31()["rope_scaling"];
  j["rope_scaling"]["high_freq_factor"] = 1.0;
  EXPECT_THAT(err(j), HasSubstr("must exceed low_freq_factor"));
  j["rope_scaling"] = {{"rope_type", "linear"}, {"type", "llama3"}, {"factor", 2.0}};
  EXPECT_THAT(err(j), HasSubstr("disagree"));
  j["rope_scaling"] = {{"factor", 2.0}};
  EXPECT_THAT(err(j), HasSubstr("no 'rope_type'"));
  j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", -2.0}};
  EXPECT_THAT(err(j), HasSubstr("'rope_scaling.factor' must be positive"));
  j["rope_scaling"] = "llama3";
  EXPECT_THAT(err(j), HasSubstr("must be an object or null"));
}

TEST(Config, Qwen2) {
  auto c = ModelConfig::from_json(qwen2(), kSrc);
  EXPECT_EQ(c.arch, Arch::Qwen2);
  EXPECT_TRUE(c.qkv_bias);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.sliding_window, 0);  // use_sliding_window false
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_FLOAT_EQ(c.rms_norm_eps, 1e-6f);
  EXPECT_EQ(c.eos_token_ids, std::vector<int>{151643});
  json j = qwen2();
  j["use_sliding_window"] = true;
  j["sliding_window"] = 4096;
  j["max_window_layers"] = 0;  // every layer windowed
  EXPECT_EQ(ModelConfig::from_json(j, kSrc).sliding_window, 4096);
  j["max_window_layers"] = 28;  // >= 24 layers: no layer windowed
  EXPECT_EQ(ModelConfig::from_json(j, kSrc).sliding_window, 0);
  j["max_window_layers"] = 21;  // layers 21..23 windowed (HF: i >= max_window_layers), the rest full
  const ModelConfig mixed = ModelConfig::from_json(j, kSrc);
  EXPECT_EQ(mixed.window(20), 0);
  EXPECT_EQ(mixed.window(21), 4096);
  EXPECT_EQ(mixed.window(23), 4096);
  EXPECT_EQ(ModelConfig::from_json(mixed.to_json(), kSrc), mixed);  // written as layer_types
}

TEST(Config, MistralSlidingWindow) {
  auto c = ModelConfig::from_json(mistral(), kSrc);
  EXPECT_EQ(c.arch, Arch::Mistral);
  EXPECT_EQ(c.sliding_window, 4096);
  EXPECT_FALSE(c.qkv_bias);
  json j = mistral();
  j["sliding_window"] = nullptr;  // Mistral-7B-v0.2 and later
  EXPECT_EQ(ModelConfig::from_json(j, kSrc).sliding_window, 0);
  j.erase("sliding_window");  // HF MistralConfig default
  EXPECT_EQ(ModelConfig::from_json(j, kSrc).sliding_window, 4096);
  j["sliding_window"] = 0;
  EXPECT_THAT(err(j), AllOf(HasSubstr("'sliding_window'"), HasSubstr("positive")));
}

TEST(Config, HeadDimAndKvHeadsDefaults) {
  json j = mistral();
  j["head_dim"] = 256;  // explicit head_dim != hidden / heads (as in Gemma-style or Mistral-Nemo)
  auto c = ModelConfig::from_json(j, kSrc);
  EXPECT_EQ(c.head_dim, 256);
  EXPECT_EQ(c.q_dim(), 8192);
  EXPECT_EQ(c.kv_dim(), 2048);
  j["head_dim"] = nullptr;
  EXPECT_EQ(ModelConfig::from_json(j, kSrc).head_dim, 128);
  j.erase("num_key_value_heads");
  EXPECT_EQ(ModelConfig::from_json(j, kSrc).num_kv_heads, 32);
  j["num_key_value_heads"] = nullptr;
  EXPECT_EQ(ModelConfig::from_json(j, kSrc).num_kv_heads, 32);
}

TEST(Config, LlamaDefaultsAndBiases) {
  json j = llama31();
  for (const char* k : {"rms_norm_eps", "tie_word_embeddings", "hidden_act", "attention_bias", "mlp_bias",
                        "bos_token_id", "eos_token_id", "torch_dtype"})
    j.erase(k);
  auto c = ModelConfig::from_json(j, kSrc);
  EXPECT_FLOAT_EQ(c.rms_norm_eps, 1e-6f);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_FALSE(c.qkv_bias);
  EXPECT_EQ(c.bos_token_id, -1);
  EXPECT_TRUE(c.eos_token_ids.empty());
  j["attention_bias"] = true;
  EXPECT_TRUE(ModelConfig::from_json(j, kSrc).qkv_bias);
  j["mlp_bias"] = true;
  EXPECT_THAT(err(j), AllOf(HasSubstr(kSrc), HasSubstr("'mlp_bias'"), HasSubstr("not supported")));
  j["mlp_bias"] = false;
  j["eos_token_id"] = nullptr;
  j["bos_token_id"] = nullptr;
  c = ModelConfig::from_json(j, kSrc);
  EXPECT_EQ(c.bos_token_id, -1);
  EXPECT_TRUE(c.eos_token_ids.empty());
}

TEST(Config, UnknownArchitecture) {
  json j = llama31();
  j["architectures"] = {"GPT2LMHeadModel"};
  EXPECT_EQ(err(j), std::string("unsupported architecture 'GPT2LMHeadModel' in ") + kSrc +
                        ": supported are LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, "
                        "Gemma2ForCausalLM, Gemma3ForCausalLM, Phi3ForCausalLM");
  j.erase("architectures");
  EXPECT_THAT(err(j), AllOf(HasSubstr(kSrc), HasSubstr("'architectures' is missing")));
  j["architectures"] = json::array();
  EXPECT_THAT(err(j), HasSubstr("'architectures'"));
}

TEST(Config, FieldRejections) {
  struct Case {
    const char* field;
    json value;  // null sentinel "erase" via is_discarded is awkward: use a string marker
    const char* expect;
  };
  const std::vector<Case> cases = {
      {"hidden_size", "<erase>", "'hidden_size' is missing"},
      {"vocab_size", "<erase>", "'vocab_size' is missing"},
      {"max_position_embeddings", "<erase>", "'max_position_embeddings' is missing"},
      {"intermediate_size", nullptr, "'intermediate_size' is null"},
      {"hidden_size", -64, "'hidden_size' must be positive"},
      {"hidden_size", "4096", "'hidden_size' must be an integer"},
      {"num_hidden_layers", 2.5, "'num_hidden_layers' must be an integer"},
      {"num_hidden_layers", true, "'num_hidden_layers' must be an integer"},
      {"vocab_size", 1e12, "'vocab_size' is out of range"},
      {"num_key_value_heads", 3, "'num_key_value_heads' (3) must divide num_attention_heads (32)"},
      {"head_dim", 127, "'head_dim' must be even"},
      {"rms_norm_eps", 0.0, "'rms_norm_eps' must be positive"},
      {"rope_theta", "big", "'rope_theta' must be a number"},
      {"rope_theta", 1e-300, "'rope_theta' 1e-300 is too small for fp32"},  // was taken as 0
      {"rms_norm_eps", 1e-40, "'rms_norm_eps' 1e-40 is too small for fp32"},  // a subnormal
      {"hidden_act", "gelu", "'hidden_act' is 'gelu'; silu is supported for LlamaForCausalLM"},
      {"tie_word_embeddings", 1, "'tie_word_embeddings' must be true or false"},
      {"eos_token_id", 200000, "'eos_token_id' holds id 200000 outside [0, vocab_size 128256)"},
      {"bos_token_id", json::array({1, 2}), "'bos_token_id' lists several ids"},
  };
  for (const Case& c : cases) {
    json j = llama31();
    if (c.value == "<erase>") j.erase(c.field);
    else j[c.field] = c.value;
    EXPECT_THAT(err(j), AllOf(HasSubstr(kSrc), HasSubstr(c.expect))) << c.field << " = " << c.value;
  }
  json j = llama31();
  j["hidden_size"] = 4000;
  j["num_attention_heads"] = 30;
  j["num_key_value_heads"] = 10;
  EXPECT_THAT(err(j), HasSubstr("not divisible by num_attention_heads (30)"));
  j["num_hidden_layers"] = 32.0;  // integral float is accepted
  j["head_dim"] = 128;
  EXPECT_EQ(ModelConfig::from_json(j, kSrc).num_layers, 32);
  EXPECT_THAT(err(json::array()), HasSubstr("must be a JSON object"));
}

TEST(Config, LoadErrorsNameTheFile) {
  sinkq::testing::TempDir d;
  EXPECT_THAT(error_of([&] { ModelConfig::load(d.file("config.json")); }), HasSubstr(d.file("config.json")));
  write_file_atomic(d.file("config.json"), "{\"hidden_size\": ");
  EXPECT_THAT(error_of([&] { ModelConfig::load(d.file("config.json")); }),
              AllOf(HasSubstr(d.file("config.json")), HasSubstr("not valid JSON")));
}

TEST(Config, ToJsonRoundTrips) {
  json q = qwen2();
  q["use_sliding_window"] = true;
  q["max_window_layers"] = 0;
  json l = llama31();
  l["attention_bias"] = true;
  l["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 2.5}};
  for (const json& j : {llama31(), qwen2(), q, mistral(), l}) {
    const auto c = ModelConfig::from_json(j, kSrc);
    const json out = c.to_json();
    EXPECT_EQ(ModelConfig::from_json(out, "to_json"), c) << out.dump();
  }
  const json out = ModelConfig::from_json(llama31(), kSrc).to_json();
  EXPECT_EQ(out["rms_norm_eps"].get<double>(), 1e-05);  // shortest decimal, not 9.99999974e-06
  EXPECT_EQ(out["model_type"], "llama");
  EXPECT_EQ(out["rope_scaling"]["rope_type"], "llama3");
  EXPECT_EQ(out["eos_token_id"], json::array({128001, 128008, 128009}));
  EXPECT_EQ(out["head_dim"], 128);
  EXPECT_EQ(ModelConfig::from_json(mistral(), kSrc).to_json()["sliding_window"], 4096);
}

}  // namespace
}  // namespace sinkq
