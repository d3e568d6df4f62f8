// sinkq quantize -m DIR (--preset P | <quantization flags>) [--calib FILE ...] -o OUT [--force]
//                [--fp-dtype auto|f32|f16|bf16] [--json] [--threads N]
// Builds the calibrated simulation (cli/quant_flags.h: rotation, clip / static-scale searches,
// prefix), packs it for the runtime (runtime/quantized_model.h) and writes the artifact
// (runtime/artifact.h) atomically. Configurations the kernels cannot run fail before the model is
// loaded. Progress on stderr; stdout says what was written (sizes, ratio to the fp16 model, time).
#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <filesystem>

#include "cli/commands.h"
#include "cli/quant_flags.h"
#include "sinkq/engine.h"
#include "runtime/artifact.h"
#include "runtime/quantized_model.h"
#include "tokenizer/tokenizer.h"

namespace sinkq::cli {

namespace {

// --fp-dtype: storage type of the embeddings / lm_head. auto: the source's when it is 16-bit, else
// f16 (an fp32 source would otherwise keep a quarter of a small model's bytes in fp32 matrices).
DType fp_dtype(const std::string& flag, DType source) {
  if (flag == "auto") return source == DType::F32 ? DType::F16 : source;
  if (flag == "f32") return DType::F32;
  if (flag == "f16") return DType::F16;
  if (flag == "bf16") return DType::BF16;
  fail("unknown --fp-dtype '{}': expected auto, f32, f16 or bf16", flag);
}

}  // namespace

void register_quantize(CLI::App& app) {
  struct Opts : CommonFlags {
    std::string out;
    bool force = false;
    std::string fp_dtype = "auto";
  };
  auto o = std::make_shared<Opts>();
  CLI::App* cmd = app.add_subcommand("quantize", "Quantize a model and write a sinkq artifact (packed weights, "
                                                 "calibrated scales, recipe, tokenizer)");
  add_model_flag(*cmd, *o);
  cmd->add_option("-o,--out", o->out, "Output artifact directory (must not exist unless --force)")->required();
  cmd->add_flag("--force", o->force, "Replace an existing output directory (atomically)");
  cmd->add_option("--fp-dtype", o->fp_dtype,
                  "Embeddings / lm_head storage: auto (the source's if 16-bit, else f16) | f32 | f16 | bf16")
      ->capture_default_str();
  const std::shared_ptr<QuantFlags> qf = add_quant_flags(*cmd);
  add_output_flags(*cmd, *o);
  cmd->callback([o, qf] {
    if (qf->dump_if_asked()) return;
    const auto t0 = std::chrono::steady_clock::now();
    apply_threads(*o);
    // Everything checkable before loading: flags, runnability, the output path.
    const quant::Recipe cfg = qf->config();
    runtime::check_runnable(cfg);
    fp_dtype(o->fp_dtype, DType::F32);
    std::error_code ec;
    SINKQ_CHECK(o->force || !std::filesystem::exists(o->out, ec),
                "'{}' already exists: refusing to overwrite it (use --force to replace it)", o->out);

    OpenOptions oo;
    oo.recipe = cfg;
    oo.pipeline = pipeline_options(*qf, "quantize");
    const std::shared_ptr<const Engine> engine = Engine::open(o->model, oo);
    const Model& model = *engine->source_model();
    std::fprintf(stderr, "quantize: packing the linear layers\n");
    runtime::QuantizeOptions qo;
    qo.fp_dtype = fp_dtype(o->fp_dtype, model.weights().embed.dtype);
    const runtime::QuantizedModel qm = engine->pack(qo);
    std::fprintf(stderr, "quantize: writing %s\n", o->out.c_str());
    runtime::WriteOptions wo;
    wo.force = o->force;
    const runtime::ArtifactInfo info = runtime::write_artifact(qm, o->model, o->out, wo);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

    const double fp16 = 2.0 * double(model.weights().parameter_count());
    uint64_t tensors = 0;
    for (const auto& [name, bytes] : info.files)
      if (name == "model.safetensors") tensors = bytes;
    if (o->json) {
      nlohmann::json files = nlohmann::json::object();
      for (const auto& [name, bytes] : info.files) files[name] = bytes;
      print_json({{"out", info.dir},
                  {"model", o->model},
                  {"config", qm.describe()},
                  {"files", files},
                  {"total_bytes", info.total_bytes},
                  {"tensor_bytes", tensors},
                  {"packed_weight_bytes", qm.packed_bytes()},
                  {"fp16_bytes", int64_t(fp16)},
                  {"ratio_to_fp16", double(tensors) / fp16},
                  {"fp_dtype", std::string(dtype_name(*qo.fp_dtype))},
                  {"seconds", seconds}});
      return;
    }
    fmt::print("wrote {} ({})\n", info.dir, qm.describe());
    for (const auto& [name, bytes] : info.files) fmt::print("  {:<26} {:>12} bytes\n", name, bytes);
    fmt::print("total {} bytes; model.safetensors = {:.3f} x the fp16 model ({:.0f} bytes); embeddings {}; {:.1f} s\n",
               info.total_bytes, double(tensors) / fp16, fp16, dtype_name(*qo.fp_dtype), seconds);
  });
}

}  // namespace sinkq::cli
