// sinkq inspect -m DIR [--json]: config, parameter count, tensors with dtypes and shapes.
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
    const auto model = Model::load(f->model);
    const ModelConfig& c = model->config();
    const ModelWeights& w = model->weights();
    nlohmann::json tensors = nlohmann::json::array();
    int64_t bytes = 0;
    // Rows of the tensor table: name, stored dtype, shape (row-major, outermost first).
    std::vector<std::tuple<std::string, std::string, std::string>> rows;
    const bool gguf = GgufFile::looks_like_gguf(f->model);
    if (gguf) {
      // A GGUF model runs dequantized to fp32; the table shows what the file stores.
      const auto g = GgufFile::open(f->model);
      for (const GgufTensor& t : g->tensors()) {
        std::vector<int64_t> shape(t.ne.rbegin(), t.ne.rend());
        tensors.push_back({{"name", t.name}, {"dtype", ggml_type_name(t.type)}, {"shape", shape}, {"file", f->model}});
        rows.emplace_back(t.name, ggml_type_name(t.type), fmt::format("[{}]", fmt::join(shape, ", ")));
        bytes += int64_t(t.nbytes);
      }
    } else {
      for (const TensorInfo* t : w.store.all()) {
        tensors.push_back({{"name", t->name}, {"dtype", dtype_name(t->dtype)}, {"shape", t->shape},
                           {"file", t->file}});
        rows.emplace_back(t->name, dtype_name(t->dtype), t->shape_str());
        bytes += int64_t(t->nbytes);
      }
    }
    const std::string note = gguf ? "GGUF: weights dequantized to fp32 at load (the full-precision model is the "
                                    "dequantized one); dtypes below are the file's" : "";
    if (f->json) {
      nlohmann::json j{{"model", f->model}, {"config", c.to_json()}, {"parameters", w.parameter_count(c)},
                       {"tensor_bytes", bytes}, {"tensors", tensors}, {"format", gguf ? "gguf" : "safetensors"}};
      if (gguf) j["note"] = note;
      print_json(j);
      return;
    }
    fmt::print("model        {}\n", f->model);
    if (gguf) fmt::print("format       {}\n", note);
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
    fmt::print("parameters   {} ({:.3f} M), {} tensor bytes\n", w.parameter_count(c),
               double(w.parameter_count(c)) / 1e6, bytes);
    fmt::print("\n{:<56} {:<5} {}\n", "tensor", "dtype", "shape");
    for (const auto& [name, dtype, shape] : rows) fmt::print("{:<56} {:<5} {}\n", name, dtype, shape);
  });
}

}  // namespace sinkq::cli
