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
    apply_threads(*o);
    // --fp-dtype auto: the source's embedding dtype when it is 16-bit, else f16 (an fp32 source
    // would otherwise keep a quarter of a small model's bytes in fp32 matrices).
    QuantizeArtifactOptions qo;
    qo.fp_dtype = o->fp_dtype;
    qo.force = o->force;
    qo.pipeline = pipeline_options(*qf, "quantize");
    const nlohmann::json r = quantize_artifact(o->model, o->out, qf->config(), qo);
    if (r.is_null()) return;  // under mpirun, a rank after the first: rank 0 wrote and reports
    if (o->json) {
      print_json(r);
      return;
    }
    fmt::print("wrote {} ({})\n", r["out"].get<std::string>(), r["config"].get<std::string>());
    for (const auto& [name, bytes] : r["files"].items()) fmt::print("  {:<26} {:>12} bytes\n", name, bytes.get<uint64_t>());
    fmt::print("total {} bytes; model.safetensors = {:.3f} x the fp16 model ({:.0f} bytes); embeddings {}; {:.1f} s\n",
               r["total_bytes"].get<uint64_t>(), r["ratio_to_fp16"].get<double>(), r["fp16_bytes"].get<double>(),
               r["fp_dtype"].get<std::string>(), r["seconds"].get<double>());
  });
}

}  // namespace sinkq::cli
