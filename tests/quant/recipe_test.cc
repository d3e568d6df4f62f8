// The Recipe (src/quant/recipe.h): the one parse / serialise (every preset, short name and a recipe
// with every kind of field reads back to itself), the per-(layer, role) weight rules (resolution,
// and the simulator's matrices under them), and errors that name the field of a bad recipe.
#include "quant/recipe.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>

#include "quant/sim.h"
#include "util/model_testutil.h"
#include "util/testutil.h"

namespace sinkq::quant {
namespace {

using nlohmann::json;
using testing::error_of;
using ::testing::HasSubstr;

constexpr auto stories = testing::stories260k;

int role(const char* name) { return parse_linear_role(name, "test"); }

// A recipe that sets every kind of field away from its default.
Recipe everything() {
  Recipe r = Recipe::from_preset("prefixquant-w4a8kv4");
  r.w.group = 128;
  r.w.symmetric = false;
  WeightRule down;
  down.layers = {0, -1};
  down.roles = 1u << role("down_proj");
  down.bits = 8;
  down.group = 0;
  down.symmetric = true;
  down.clip = 0.9f;
  WeightRule qk;
  qk.roles = (1u << role("q_proj")) | (1u << role("k_proj"));
  qk.clip_grid = true;
  r.weight_rules = {down, qk};
  r.a.clip_grid = false;
  r.a.clip = 0.95f;
  r.kv.granularity = KvGranularity::Tensor;
  r.rotate.seed = 7;
  r.prefix.spec = "ids:1,2";
  r.prefix.tokens = {1, 2};
  r.prefix.source = PrefixSim::Source::Quant;
  r.prefix.bos_id = 1;
  r.prefix.eta = 32.0;
  r.calib.file = "c4.jsonl";
  r.calib.samples = 4;
  r.calib.len = 256;
  r.calib.seed = 3;
  r.calib.weight_rows = 64;
  r.calib.grid = {1.0f, 0.9f, 0.8f};
  return r;
}

TEST(Recipe, JsonReadsBackToItself) {
  std::vector<std::pair<std::string, Recipe>> all;
  for (const auto& n : Recipe::preset_names()) all.emplace_back(n, Recipe::from_preset(n));
  for (const char* n : {"w4a8kv4-g128-static", "w8a8kv8", "w4a4-g32-asym", "w4a8kv4", "w8a8-head8", "w4a8kv4-static-head8"})
    all.emplace_back(n, Recipe::from_preset(n));
  all.emplace_back("everything", everything());
  Recipe cross = Recipe::from_preset("w8a8");
  cross.a.mode = ActMode::Cross;
  cross.a.alpha = 0.3f;
  cross.a.cross_columns = ColumnMode::RunningMax;
  all.emplace_back("cross", cross);
  Recipe rules_on_fp = Recipe::from_preset("fp16");  // weights off except where a rule turns them on
  rules_on_fp.w.group = 64;
  WeightRule on;
  on.layers = {1};
  on.bits = 4;
  rules_on_fp.weight_rules = {on};
  all.emplace_back("rules on fp16", rules_on_fp);
  Recipe recent = Recipe::from_preset("kvquant-2bit-1pct");
  recent.kv.recent = 64;
  all.emplace_back("kvquant recent window", recent);
  Recipe fast = Recipe::from_preset("prefixquant-w4a8kv4");  // the static search's cost settings
  fast.calib.grid = {0.95f, 0.85f, 0.75f};
  fast.calib.search_samples = 2;
  fast.calib.refine_steps = 10;
  fast.calib.refine_width = 0.04f;
  all.emplace_back("coarse search", fast);
  for (const auto& [name, r] : all) {
    SCOPED_TRACE(name);
    const json j = r.to_json();
    const Recipe back = Recipe::from_json(j, "test");
    EXPECT_EQ(back.to_json(), j);
    EXPECT_EQ(back.describe(), r.describe());
    // Through text, as a file holds it (integers come back unsigned, floats as doubles).
    EXPECT_EQ(json_first_difference(Recipe::from_json(json::parse(j.dump(2)), "test").to_json(), j, "recipe"), "");
  }
  // The rule's group survives although the default weights are off (bits 16).
  EXPECT_EQ(Recipe::from_json(rules_on_fp.to_json(), "t").weights(1, 0, 2).group, 64);
  // The search's cost settings are written only when set: recipes from before them are unchanged.
  const json pq = Recipe::from_preset("prefixquant-w4a8kv4").to_json();
  EXPECT_FALSE(pq.at("calibration").contains("search_samples"));
  EXPECT_FALSE(pq.at("calibration").contains("refine"));
  EXPECT_EQ(fast.to_json().at("calibration").at("refine").at("steps"), 10);
}

TEST(Recipe, ShortNamesAreBenchsGrammar) {
  const Recipe r = Recipe::from_preset("w4a8kv4-g128-asym-static");
  EXPECT_EQ(r.w.bits, 4);
  EXPECT_EQ(r.w.group, 128);
  EXPECT_FALSE(r.w.symmetric);
  EXPECT_EQ(r.a.bits, 8);
  EXPECT_EQ(r.a.mode, ActMode::Static);
  EXPECT_EQ(r.kv.bits, 4);
  EXPECT_EQ(r.kv.mode, KvMode::Dynamic);
  EXPECT_EQ(r.kv.granularity, KvGranularity::Head);
  // The named presets are the short names with the same meaning.
  EXPECT_EQ(Recipe::from_preset("w8a8").describe(), [] {
    Recipe s;
    s.w.bits = 8;
    s.a.bits = 8;
    return s.describe();
  }());
  EXPECT_THAT(error_of([] { Recipe::from_preset("w4a8-g48"); }), HasSubstr("--preset"));
}

// The int8 head: off by default and then absent from the JSON (recipes and artifacts written before
// it read back unchanged), "head": {"bits": 8} when on (no group_size key: int8 is per row, as
// before int4 heads), {"bits": 4, "group_size": G} for int4; 8, 4 or 16 only, the group only with 4
// bits and only a packed W4 group; not with IntactKV+Cal.
TEST(Recipe, HeadIsItsOwnSetting) {
  const Recipe off = Recipe::from_preset("w8a8");
  EXPECT_FALSE(off.head.on());
  EXPECT_FALSE(off.to_json().contains("head"));
  const Recipe on = Recipe::from_preset("w8a8-head8");
  EXPECT_EQ(on.head.bits, 8);
  EXPECT_EQ(on.head.group, 0);
  EXPECT_EQ(on.to_json().at("head").at("bits"), 8);
  EXPECT_FALSE(on.to_json().at("head").contains("group_size"));
  EXPECT_THAT(on.describe(), HasSubstr("| head W8 per-row A8 per-token"));
  EXPECT_THAT(error_of([] { Recipe::from_preset("fp16-head8"); }), HasSubstr("--preset"));
  // -head4: int4 in groups of 32 (Q4_0's block), written and read back.
  const Recipe four = Recipe::from_preset("w4a8-head4");
  EXPECT_EQ(four.head.bits, 4);
  EXPECT_EQ(four.head.group, 32);
  EXPECT_EQ(four.head.weights().bits, 4);
  EXPECT_EQ(four.head.weights().group, 32);
  EXPECT_TRUE(four.head.weights().symmetric);
  EXPECT_THAT(four.describe(), HasSubstr("| head W4 g32 A8 per-token"));
  EXPECT_EQ(four.to_json().at("head").at("group_size"), 32);
  EXPECT_EQ(Recipe::from_json(four.to_json(), "r.json").to_json(), four.to_json());
  Recipe head_only;  // the head alone is a quantization (weights, activations and KV full precision)
  head_only.head.bits = 8;
  EXPECT_TRUE(head_only.any());
  json j = on.to_json();
  j["head"]["bits"] = 3;
  EXPECT_THAT(error_of([&] { Recipe::from_json(j, "r.json"); }), HasSubstr("--head-bits must be 8 or 4"));
  j["head"]["bits"] = 8;
  j["head"]["group_size"] = 32;
  EXPECT_THAT(error_of([&] { Recipe::from_json(j, "r.json"); }), HasSubstr("--head-group 32 with --head-bits 8"));
  j["head"]["bits"] = 4;
  j["head"]["group_size"] = 48;
  EXPECT_THAT(error_of([&] { Recipe::from_json(j, "r.json"); }), HasSubstr("--head-group must be 0 (per row), 32, 64 or 128"));
  j["head"] = {{"bits", 8}, {"bitz", 8}};
  EXPECT_THAT(error_of([&] { Recipe::from_json(j, "r.json"); }), HasSubstr("field 'head.bitz': unknown key"));
  for (const char* preset : {"w4a8-head8", "w4a8-head4"}) {
    Recipe trained = Recipe::from_preset(preset);
    trained.prefix.spec = "bos";
    trained.prefix.tokens = {1};
    trained.prefix.train_epochs = 1;
    EXPECT_THAT(error_of([&] { trained.validate(); }),
                HasSubstr(fmt::format("--head-bits {} with --prefix-train", trained.head.bits)));
  }
}

TEST(Recipe, WeightRulesResolveInOrder) {
  const Recipe r = everything();  // base W4 g128 asym grid; down of layers 0 and -1: W8 per-channel sym clip 0.9
  const int L = 5, down = role("down_proj"), q = role("q_proj"), up = role("up_proj");
  for (int l = 0; l < L; ++l) {
    const WeightSim d = r.weights(l, down, L);
    const bool ruled = l == 0 || l == L - 1;
    EXPECT_EQ(d.bits, ruled ? 8 : 4) << l;
    EXPECT_EQ(d.group, ruled ? 0 : 128) << l;
    EXPECT_EQ(d.symmetric, ruled) << l;
    EXPECT_EQ(d.clip_grid, !ruled) << l;  // a fixed ratio replaces the grid
    if (ruled) {
      EXPECT_EQ(d.clip, 0.9f);
    }
    const WeightSim u = r.weights(l, up, L);
    EXPECT_EQ(u.bits, 4);
    EXPECT_EQ(u.group, 128);
    EXPECT_TRUE(r.weights(l, q, L).clip_grid);
  }
  // A later rule wins for the fields it sets, keeps the rest.
  Recipe two = Recipe::from_preset("w4a8");
  WeightRule a, b;
  a.bits = 8;
  b.roles = 1u << q;
  b.bits = 4;
  b.group = 32;
  two.weight_rules = {a, b};
  EXPECT_EQ(two.weights(2, q, L).bits, 4);
  EXPECT_EQ(two.weights(2, q, L).group, 32);
  EXPECT_EQ(two.weights(2, up, L).bits, 8);
  EXPECT_EQ(two.weights(2, up, L).group, 0);
  EXPECT_TRUE(two.weights_on());
  EXPECT_FALSE(two.weight_clip_grid());
  EXPECT_TRUE(everything().weight_clip_grid());
  EXPECT_THAT(two.describe(), HasSubstr("all layers all roles: W8 | all layers q_proj: W4 g32"));
}

TEST(Recipe, BadRecipesNameTheField) {
  auto bad = [](const std::function<void(json&)>& edit) {
    json j = everything().to_json();
    edit(j);
    return error_of([&] { Recipe::from_json(j, "r.json"); });
  };
  EXPECT_THAT(bad([](json& j) { j["weights"]["bits"] = "4"; }), HasSubstr("r.json: field 'weights.bits': must be an integer"));
  EXPECT_THAT(bad([](json& j) { j["weights"]["bits"] = 1; }), HasSubstr("--w-bits must be 2..8"));
  EXPECT_THAT(bad([](json& j) { j["wieghts"] = json::object(); }), HasSubstr("field 'wieghts': unknown key"));
  EXPECT_THAT(bad([](json& j) { j["kv"]["mode"] = "sometimes"; }), HasSubstr("field 'kv.mode': unknown KV quantization"));
  EXPECT_THAT(bad([](json& j) { j["activations"]["clip_ratio"] = 1.5; }),
              HasSubstr("field 'activations.clip_ratio': must be in (0, 1]"));
  EXPECT_THAT(bad([](json& j) { j["weight_rules"][0]["roles"] = {"down"}; }),
              HasSubstr("field 'weight_rules[0].roles[0]': unknown role 'down'"));
  EXPECT_THAT(bad([](json& j) { j["weight_rules"][0]["roles"] = {"lm_head"}; }),
              HasSubstr("role 'lm_head' has its own setting, not a weight rule (embed_tokens / lm_head: --head-bits"));
  EXPECT_THAT(bad([](json& j) { j["weight_rules"][0].erase("layers"); }), HasSubstr("field 'weight_rules[0]': needs"));
  EXPECT_THAT(bad([](json& j) { j["weight_rules"][0]["layers"] = json::array(); }),
              HasSubstr("field 'weight_rules[0].layers': must be \"all\" or a non-empty list"));
  EXPECT_THAT(bad([](json& j) { j["weight_rules"][1] = {{"layers", "all"}, {"roles", "all"}}; }),
              HasSubstr("weight_rules[1]: sets nothing"));
  EXPECT_THAT(bad([](json& j) { j["weight_rules"][0]["bits"] = 9; }), HasSubstr("weight_rules[0].bits must be 2..8"));
  EXPECT_THAT(bad([](json& j) { j["prefix"]["tokens"] = {1, "x"}; }),
              HasSubstr("field 'prefix.tokens[1]': must be an integer"));
  EXPECT_THAT(bad([](json& j) { j["calibration"]["grid"] = json::array(); }),
              HasSubstr("field 'calibration.grid': must be a non-empty list"));
  EXPECT_THAT(bad([](json& j) { j["calibration"]["search_samples"] = -1; }),
              HasSubstr("--calib-search-samples must be >= 0"));
  EXPECT_THAT(bad([](json& j) { j["calibration"]["refine"] = 3; }), HasSubstr("field 'calibration.refine': must be an object"));
  EXPECT_THAT(bad([](json& j) { j["calibration"]["refine"] = {{"steps", 4}, {"width", 1.5}}; }),
              HasSubstr("refine_width must be in (0, 1)"));
  EXPECT_THAT(bad([](json& j) { j["calibration"]["refine"] = {{"step", 4}}; }),
              HasSubstr("field 'calibration.refine.step': unknown key"));
  // Its root inside a larger file is part of the path.
  EXPECT_THAT(error_of([] { Recipe::from_json(json{{"kv", {{"bits", true}}}}, "a/sinkq_recipe.json", "recipe"); }),
              HasSubstr("a/sinkq_recipe.json: field 'recipe.kv.bits': must be an integer"));
  // A layer the model does not have.
  EXPECT_THAT(error_of([] {
                Recipe r = everything();
                r.weight_rules[0].layers = {0, -3};
                r.check_layers(2);
              }),
              HasSubstr("weight_rules[0]: layer -3 does not exist (the model has 2 layers"));
  EXPECT_NO_THROW(everything().check_layers(2));
}

// The simulator under weight rules: each matrix is fake-quantized with its own resolved setting
// (bit for bit fake_quant_weight of it), and a matrix a rule keeps at 16 bits is the base's own.
TEST(Recipe, SimulatorQuantizesEachMatrixWithItsRule) {
  Recipe r = Recipe::from_preset("w4a16");
  WeightRule down8, keep;
  down8.layers = {0, -1};
  down8.roles = 1u << role("down_proj");
  down8.bits = 8;
  keep.layers = {1};
  keep.roles = 1u << role("o_proj");
  keep.bits = kBitsOff;
  r.weight_rules = {down8, keep};
  const auto base = stories();
  const auto q = fake_quantize_weights(base, r);
  const int L = base->config().num_layers;
  ASSERT_GE(L, 3);
  for (int l = 0; l < L; ++l)
    for (int i = 0; i < kNumLinearRoles; ++i) {
      SCOPED_TRACE(fmt::format("layer {} {}", l, kLinearRoles[i].name));
      const Mat& src = base->weights().layers[size_t(l)].mat(i);
      const Mat& got = q->weights().layers[size_t(l)].mat(i);
      const WeightSim ws = r.weights(l, i, L);
      if (!ws.on()) {
        EXPECT_EQ(got.data, src.data);  // shared, untouched
        continue;
      }
      std::vector<float> want(size_t(src.rows * src.cols));
      to_f32(src.dtype, src.data, want.data(), want.size());
      fake_quant_weight(ws, want.data(), src.rows, src.cols);
      ASSERT_EQ(got.dtype, DType::F32);
      EXPECT_EQ(std::memcmp(got.data, want.data(), want.size() * sizeof(float)), 0);
      // The rule matters: down of the first and last layer hold int8 levels, the rest int4.
      if (i == role("down_proj")) {
        std::vector<float> other = want;
        to_f32(src.dtype, src.data, other.data(), other.size());
        WeightSim flipped = ws;
        flipped.bits = ws.bits == 8 ? 4 : 8;
        fake_quant_weight(flipped, other.data(), src.rows, src.cols);
        EXPECT_NE(std::memcmp(got.data, other.data(), other.size() * sizeof(float)), 0);
        EXPECT_EQ(ws.bits, l == 0 || l == L - 1 ? 8 : 4);
      }
    }
  EXPECT_THAT(error_of([&] {
                Recipe far = r;
                far.weight_rules[0].layers = {L};
                fake_quantize_weights(base, far);
              }),
              HasSubstr("does not exist"));
}

}  // namespace
}  // namespace sinkq::quant
