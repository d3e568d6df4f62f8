// sinkq/engine/quantize.cc — quantize_artifact (include/sinkq/engine.h): what `sinkq quantize` and
// sinkq.quantize() run.
#include <chrono>
#include <filesystem>

#include "core/error.h"
#include "runtime/artifact.h"
#include "sinkq/engine.h"

namespace sinkq {

namespace {
DType resolve_fp_dtype(const std::string& value, DType source, const std::string& name) {
  if (value == "auto") return source == DType::F32 ? DType::F16 : source;
  if (value == "f32") return DType::F32;
  if (value == "f16") return DType::F16;
  if (value == "bf16") return DType::BF16;
  fail("unknown {} '{}': expected auto, f32, f16 or bf16", name, value);
}
}  // namespace

nlohmann::json quantize_artifact(const std::string& model_path, const std::string& out, const quant::Recipe& recipe,
                                 const QuantizeArtifactOptions& opt) {
  const auto t0 = std::chrono::steady_clock::now();
  // Everything that can be refused without loading is refused first.
  runtime::check_runnable(recipe);
  resolve_fp_dtype(opt.fp_dtype, DType::F32, opt.fp_dtype_name);
  SINKQ_CHECK(!recipe.head.on() || opt.fp_dtype == "auto", "{} {} with --head-bits {}: the embeddings and the LM head "
              "are stored in int{}, so no full-precision table is left to store", opt.fp_dtype_name, opt.fp_dtype,
              recipe.head.bits, recipe.head.bits);
  std::error_code ec;
  SINKQ_CHECK(opt.force || !std::filesystem::exists(out, ec),
              "'{}' already exists: refusing to overwrite it (use {} to replace it)", out, opt.force_name);

  OpenOptions oo;
  oo.recipe = recipe;
  oo.pipeline = opt.pipeline;
  const std::shared_ptr<const Engine> engine = Engine::open(model_path, oo);
  const Model& model = *engine->source_model();
  std::fprintf(stderr, "quantize: packing the linear layers\n");
  runtime::QuantizeOptions qo;
  qo.fp_dtype = resolve_fp_dtype(opt.fp_dtype, model.weights().embed.dtype, opt.fp_dtype_name);
  const runtime::QuantizedModel qm = engine->pack(qo);
  std::fprintf(stderr, "quantize: writing %s\n", out.c_str());
  runtime::WriteOptions wo;
  wo.force = opt.force;
  const runtime::ArtifactInfo info = runtime::write_artifact(qm, model_path, out, wo);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  const double fp16 = 2.0 * double(model.weights().parameter_count());
  uint64_t tensors = 0;
  nlohmann::json files = nlohmann::json::object();
  for (const auto& [name, bytes] : info.files) {
    files[name] = bytes;
    if (name == "model.safetensors") tensors = bytes;
  }
  return {{"out", info.dir},
          {"model", model_path},
          {"config", qm.describe()},
          {"files", files},
          {"total_bytes", info.total_bytes},
          {"tensor_bytes", tensors},
          {"packed_weight_bytes", qm.packed_bytes()},
          {"fp16_bytes", int64_t(fp16)},
          {"ratio_to_fp16", double(tensors) / fp16},
          {"fp_dtype", runtime::fp_dtype_label(qm.model->weights())},
          {"seconds", seconds}};
}

}  // namespace sinkq
