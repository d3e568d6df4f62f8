// sinkq/runtime/artifact.h — the quantized model as one self-describing directory, written
// atomically and loaded by mmap.
//
// Layout of an artifact directory (format_version 3):
//   config.json          the source model's HF config, byte for byte (validated on load exactly as
//                        a model directory's: io/config.h)
//   model.safetensors    every tensor (io/safetensors.h; U8 / I32 tensors are raw integer dtypes):
//     <linear>.codes        U8  [rows, row_bytes]  packed codes of the linear's first column block
//     <linear>.scales       F32 [rows, groups]     its scales
//     <linear>.zeros        U8  [rows, groups]     its zero points (asymmetric formats only)
//     <linear>.tail.{codes,scales,zeros}           the ragged last group's block, when there is one
//         <linear> = the HF name without ".weight", e.g. model.layers.0.self_attn.q_proj; the byte
//         layout is formats/packed_format.h's planar layout (kernel interleaving is a repack at load time)
//     model.layers.<l>.<site>.act_scale  F32 [1]   static per-tensor activation scale (site =
//                                                  attn_in | o_in | mlp_in | down_in)
//     model.layers.<l>.<site>.cross_col_max F32 [in] CrossQuant's static column maxima at that
//                                                  site (--a-cross-cols static; the fold b and
//                                                  the token factor follow from the recipe's alpha)
//     model.layers.<l>.{k,v}.kv_scale   F32 [n]    static KV params of that layer and site (n =
//     model.layers.<l>.{k,v}.kv_zero    I32 [n]    kv heads per-head, 1 per-tensor; zeros only when
//     model.layers.<l>.{k,v}.kv_clip    F32 [1]    asymmetric; the chosen clip ratio, informational)
//     sinkq.prefix.tokens   I32 [P]                the KV prefix's token ids
//     sinkq.prefix.k / .v   F32 [layers, P, kv_dim] its keys (after RoPE and R3) and values
//     model.embed_tokens.weight, lm_head.weight (untied only), norms, q/k/v biases: the HF
//         names; embeddings / lm_head in the QuantizedModel's dtype (the source's, or fp_dtype),
//         norms and biases F32
//     lm_head.{codes,scales}, model.embed_tokens.{codes,scales} (untied only): instead of those
//         two, with the recipe's int8 / int4 head (quant/recipe.h HeadSim): W8 per row or W4 in
//         groups, as a linear's blocks (a ragged last group: <base>.tail.{codes,scales});
//         fp_dtype is then "int8" / "int4"
//     __metadata__: "format" = "sinkq-artifact", "format_version" = "3", "recipe_checksum" (of
//         sinkq_recipe.json's format_version, config_checksum, lm_head_tied, fp_dtype, recipe
//         and files: artifact_schema.h), and per linear
//         "<linear>" = {"shape": [rows, cols], "blocks": [[col0, cols, PackedFormat value], ..]}
//   sinkq_recipe.json    format / format_version / sinkq_version, "source" ("model_dir": the model
//                        directory or GGUF file quantized), "config_checksum" (of config.json's
//                        bytes), "describe" (one line), "lm_head_tied", "fp_dtype", "recipe"
//                        (quant::Recipe::to_json — weights, weight rules, activations, KV,
//                        rotation, prefix tokens, calibration settings — read back
//                        by Recipe::from_json and required to equal its own re-serialisation; the
//                        packed layout of every linear and the static params follow from it and
//                        config.json), "provenance" (what the pipeline recorded beside it: the
//                        calibration result and data, the prefix resolution; wall-clock times
//                        removed), "tensors" (inventory: name -> dtype, shape, checksum of the bytes
//                        seeded by dtype and shape: artifact_schema.h), "files" (name -> checksum
//                        of each tokenizer / generation file below: the loader refuses one edited,
//                        missing, or present but not recorded; absent in artifacts written before
//                        it, which load unchecked there)
//   tokenizer files      copied from the source directory (tokenizer.json, tokenizer.model,
//                        tokenizer_config.json, special_tokens_map.json, generation_config.json, ...),
//                        or tokenizer.gguf: a GGUF source's tokenizer.* metadata
//
// Deterministic: the same QuantizedModel gives byte-identical files (sorted JSON keys, no times,
// safetensors in a fixed order). Atomic: everything is written into OUT.tmp-<pid>, then one
// rename(2); on any error the temp directory is removed and OUT is untouched.
#pragma once

#include <deque>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "io/safetensors.h"

#include "runtime/quantized_model.h"

namespace sinkq::runtime {

// 2: the recipe is quant::Recipe::to_json under "recipe" (per-(layer, role) weight rules); the
//    "runtime", "rotation", "prefix" and "preset" blocks of version 1 are gone.
// 3: checksums (core/checksum.h): per tensor in the inventory, config.json's as "config_checksum",
//    the recipe's in model.safetensors' __metadata__ ("recipe_checksum"); "source" is the model path.
inline constexpr int kArtifactFormatVersion = 3;

// sinkq_recipe.json's "fp_dtype" of w: the embeddings' storage type, or "int8" / "int4" for a packed head.
std::string fp_dtype_label(const ModelWeights& w);

// The artifact's tensors that qm's model holds (all of them; a pipeline stage, Model::stage():
// its layers' and the ends it holds) in the file's data order (safetensors_data_order), and the
// __metadata__ entries of its linears.
struct StageTensors {
  std::vector<TensorToWrite> tensors;
  nlohmann::json meta_linears = nlohmann::json::object();
  std::deque<std::vector<std::byte>> storage;  // the copies `tensors` point into
};
StageTensors stage_tensors(const QuantizedModel& qm);

struct WriteOptions {
  // Replace an existing OUT (atomically: OUT is renamed away, the new one renamed in, the old one
  // deleted). Without it an existing OUT is a sinkq::Error.
  bool force = false;
  // Test hook: called with each file name just before it is written into the temp directory; may
  // throw to simulate a failure mid-write.
  std::function<void(const std::string& file)> before_file;
  // The first stage of a pipeline (dist/pipeline.h) writes the whole artifact: `specs` are the
  // other stages' tensors (with the stage that holds each), `meta_linears` their linears' metadata,
  // and read(stage, spec, bytes) fills a tensor's bytes, asked for in the file's data order.
  struct Remote {
    std::vector<std::pair<SafetensorsStreamWriter::TensorSpec, int>> specs;
    nlohmann::json meta_linears = nlohmann::json::object();
    std::function<void(int stage, const SafetensorsStreamWriter::TensorSpec& spec, std::span<std::byte> out)> read;
  };
  std::optional<Remote> remote;
};

// What was written: file -> bytes, and their sum.
struct ArtifactInfo {
  std::string dir;
  std::vector<std::pair<std::string, uint64_t>> files;
  uint64_t total_bytes = 0;
};

// Writes `qm` (whose source model directory is `model_dir`: config.json and tokenizer files are
// copied from it) into `out_dir`. Throws sinkq::Error naming the path on any failure (nothing is
// left behind then).
ArtifactInfo write_artifact(const QuantizedModel& qm, const std::string& model_dir, const std::string& out_dir,
                            const WriteOptions& opt = {});

// Whether `dir` looks like an artifact (has sinkq_recipe.json); says nothing about its validity.
bool is_artifact(const std::string& dir);

// Loads and validates an artifact (mmap; the packed codes are repacked for the kernels, the
// embeddings stay in the mapping). Every inconsistency (missing or mistyped recipe field, unknown
// format value, tensor missing / extra / of the wrong shape or dtype, a checksum that differs: a
// tensor, config.json, or the recipe the tensors were packed with) is a sinkq::Error naming the
// file and the field or tensor. The result's cfg is the stored Recipe (what was simulated and
// packed); its recipe JSON is that recipe with the provenance beside it.
// `stage`: a pipeline stage (io/weights.h LayerRange, dist/pipeline.h) reads and verifies only its
// own layers' tensors (and the embeddings / head it holds); the rest is checked by header only.
QuantizedModel load_artifact(const std::string& dir, LayerRange stage = {});

}  // namespace sinkq::runtime
