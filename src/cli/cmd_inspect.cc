// sinkq inspect -m DIR [--json]: config, parameter count, tensors with dtypes and shapes.
// A GGUF file is read for its header alone (config, tensor table, licence): nothing is dequantized,
// so it takes milliseconds whatever the model's size; its tensors are checked when a command loads it.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "cli/commands.h"
#include "io/gguf.h"
#include "model/model.h"

namespace sinkq::cli {

void register_inspect(CLI::App& app) {
  auto f = std::make_shared<CommonFlags>();
  CLI::App* cmd = app.add_subcommand("inspect", "Show a model's config, parameter count and tensors");
  add_model_flag(*cmd, *f);
  add_output_flags(*cmd, *f);
  cmd->callback([f] {
    const bool gguf = GgufFile::looks_like_gguf(f->model);
    std::shared_ptr<const Model> model;
    std::shared_ptr<GgufFile> g;
    ModelConfig c;
    int64_t params = 0, bytes = 0;
    uint64_t f32_bytes = 0;
    // Rows of the tensor table: name, stored dtype, shape (row-major, outermost first).
    std::vector<std::tuple<std::string, std::string, std::string>> rows;
    nlohmann::json tensors = nlohmann::json::array();
    if (gguf) {
      g = GgufFile::open(f->model);
      c = model_config_from_gguf(*g);
      for (const GgufTensor& t : g->tensors()) {
        std::vector<int64_t> shape(t.ne.rbegin(), t.ne.rend());
        tensors.push_back({{"name", t.name}, {"dtype", ggml_type_name(t.type)}, {"shape", shape}, {"file", f->model}});
        rows.emplace_back(t.name, ggml_type_name(t.type), fmt::format("[{}]", fmt::join(shape, ", ")));
        bytes += int64_t(t.nbytes);
        f32_bytes += uint64_t(t.numel()) * 4;
        if (t.name != "rope_freqs.weight") params += t.numel();  // read into the config
      }
    } else {
      model = Model::load(f->model);
      c = model->config();
      params = model->weights().parameter_count(c);
      for (const TensorInfo* t : model->weights().store.all()) {
        tensors.push_back({{"name", t->name}, {"dtype", dtype_name(t->dtype)}, {"shape", t->shape},
                           {"file", t->file}});
        rows.emplace_back(t->name, dtype_name(t->dtype), t->shape_str());
        bytes += int64_t(t->nbytes);
      }
    }
    // How a command will hold the GGUF's weights (io/weights.h GgufWeights); its full-precision
    // model is the dequantized one either way.
    const bool stored = gguf && gguf_weights(f32_bytes) == GgufWeights::Stored;
    const std::string note = !gguf ? ""
                             : stored ? fmt::format("GGUF: block-quantized weights held as stored and dequantized where "
                                                    "used ({:.2f} GB as fp32; the full-precision model is the dequantized "
                                                    "one); dtypes below are the file's", double(f32_bytes) / 1e9)
                                      : "GGUF: weights dequantized to fp32 at load (the full-precision model is the "
                                        "dequantized one); dtypes below are the file's";
    // What the file says of itself (general.name, general.license): the only licence record a
    // GGUF fetched from a mirror carries.
    auto meta = [&](const char* key) {
      return g && g->has(key) && g->metadata_type(key) == 8 ? g->get_string(key) : std::string();
    };
    const std::string name = meta("general.name"), license = meta("general.license");
    if (f->json) {
      nlohmann::json j{{"model", f->model}, {"config", c.to_json()}, {"parameters", params},
                       {"tensor_bytes", bytes}, {"tensors", tensors}, {"format", gguf ? "gguf" : "safetensors"}};
      if (gguf) {
        j["note"] = note;
        j["weights_held"] = stored ? "stored" : "f32";
        j["name"] = name;
        j["license"] = license;
      }
      print_json(j);
      return;
    }
    fmt::print("model        {}\n", f->model);
    if (gguf) fmt::print("format       {}\n", note);
    if (!name.empty() || !license.empty())
      fmt::print("name         {}  license {}\n", name.empty() ? "-" : name, license.empty() ? "(not stated)" : license);
    fmt::print("architecture {}\n", c.architecture);
    fmt::print("layers {}  hidden {}  intermediate {}  heads {}  kv_heads {}  head_dim {}\n",
               c.num_layers, c.hidden_size, c.intermediate_size, c.num_heads, c.num_kv_heads, c.head_dim);
    fmt::print("vocab {}  max_positions {}  rope_theta {}  rope_scaling {}  rms_eps {}\n", c.vocab_size,
               c.max_position_embeddings, c.rope_theta, c.rope_scaling.type, c.rms_norm_eps);
    fmt::print("tied_embeddings {}  qkv_bias {}  sliding_window {}  bos {}  eos {}\n",
               c.tie_word_embeddings, c.qkv_bias, c.sliding_window, c.bos_token_id,
               c.eos_token_ids.empty() ? -1 : c.eos_token_ids[0]);
    // The family's features (io/config.h LayerSpec) and the per-layer values.
    const LayerSpec& sp = c.spec();
    std::string feats;
    auto add = [&](bool on, const std::string& what) {
      if (on) feats += (feats.empty() ? "" : ", ") + what;
    };
    add(sp.qk_norm, "q/k norms");
    add(sp.post_norms, "post-norms");
    add(sp.norm_offset, "(1 + w) norms (folded)");
    add(sp.act == Activation::GeluTanh, "GeGLU");
    add(sp.embed_scale, "embeddings x sqrt(hidden)");
    add(sp.fused_linears, "fused qkv / gate_up");
    add(c.query_pre_attn_scalar > 0, fmt::format("score scale {}", c.attn_scale()));
    add(c.attn_softcap > 0, fmt::format("attention soft-cap {}", c.attn_softcap));
    add(c.final_softcap > 0, fmt::format("logit soft-cap {}", c.final_softcap));
    add(c.rope_local_theta > 0, fmt::format("local RoPE base {} on windowed layers", c.rope_local_theta));
    if (!c.layer_sliding.empty()) {
      std::string ls;
      for (int l = 0; l < c.num_layers; ++l) ls += c.window(l) ? 'W' : '.';
      add(true, "windowed layers " + ls);
    }
    fmt::print("features     {}\n", feats.empty() ? "none beyond Llama's" : feats);
    fmt::print("parameters   {} ({:.3f} M), {} tensor bytes\n", params, double(params) / 1e6, bytes);
    fmt::print("\n{:<56} {:<5} {}\n", "tensor", "dtype", "shape");
    for (const auto& [name, dtype, shape] : rows) fmt::print("{:<56} {:<5} {}\n", name, dtype, shape);
  });
}

}  // namespace sinkq::cli
