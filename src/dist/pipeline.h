// sinkq/dist/pipeline.h — pipeline parallelism over MPI ranks (issue 21; docs/scale.md).
//
// `mpirun -np N sinkq ppl|generate|bench ...`: the decoder layers are split into N contiguous
// stages balanced by bytes (partition_layers); rank r loads only its stage's tensors (the
// loaders' LayerRange: rank 0 also the embeddings, the last rank the final norm and LM head) and
// keeps the KV cache of its own layers. Rank 0 runs the command: tokenization, output, progress;
// its Forward's StageLink (model/model.h) hands every chunk of tokens on after rank 0's layers —
// the chunk's header and token ids, then the activations [T, hidden] in fp32 — from rank to rank;
// the last rank returns the logits asked for (generation: the last row) or, for perplexity, only
// each window's summed NLL (pipeline_perplexity: rank 0 keeps feeding windows, so every stage
// works on another window at once). The other ranks run worker() until rank 0 stops them.
//
// Results equal the single-process run bit for bit: every stage runs the same per-layer code on
// the same chunks (Forward's chunking by max_batch), the last stage the same head over the same
// rows, and rank 0 adds the windows' sums in the same order.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "eval/ppl.h"
#include "io/weights.h"
#include "model/model.h"

namespace sinkq::dist {

// Bytes a stage holds: each layer's tensors, and the parts at either end (the embedding table at
// the first stage; the final norm and LM head — the table again when tied — at the last).
struct LayerBytes {
  std::vector<int64_t> layers;  // [num_layers]
  int64_t first = 0, last = 0;
};
// Of a model directory, GGUF file (its tensors as the fp32 they are dequantized to) or sinkq
// artifact, from the files' headers (no tensor data is read).
LayerBytes layer_bytes(const std::string& path);
// N contiguous stages of at least one layer each that minimise the largest stage's bytes (ties: the
// earliest split); stage r = [begin, end). Error naming -np when N > the number of layers.
std::vector<LayerRange> partition_layers(const LayerBytes& b, int ranks);

// The stage of this rank for `path` (the whole model without MPI); `report`: the one stage_report()
// names (the engine's, not a --kld reference's).
LayerRange stage_of(const std::string& path, bool report = true);

// A Forward on a later stage of the pipeline: (body capacity, max_batch) → a Forward over this
// rank's model, prepared as the engine prepares its sessions (KV store, hooks, prefix).
// `model`: 0 the engine's, 1 its full-precision reference (--kld, opened by open_reference).
using MakeForward = std::function<std::unique_ptr<Forward>(int model, int64_t capacity, int64_t max_batch)>;
// Ranks after the first: serves rank 0's chunks until it stops the job (then MPI_Finalize and
// exit(0)); an error aborts every rank. open_reference: load this stage of the reference model,
// when rank 0 does (collective: its prefix rows are computed over the stages). Never returns.
[[noreturn]] void worker(const MakeForward& make, const std::function<void()>& open_reference);

// Rank 0: the link of one Forward (one session) of model 0 / 1 (see MakeForward) to the later stages.
std::shared_ptr<StageLink> make_link(const Forward& fwd, int model);
// Rank 0: tells the other stages to open their reference stage now (Engine::reference()).
void open_reference_on_workers();

// Rank 0: perplexity() (eval/ppl.h) over the pipeline — the same windows, the same NLL (and with a
// reference, KL) per window bit for bit — with every window fed as soon as rank 1 takes it, so the
// stages work on consecutive windows at once. The reference's logits of a window go through the
// pipeline just before the model's and wait on the last stage.
PplResult pipeline_perplexity(Forward& fwd, const std::vector<int32_t>& toks, const PplOptions& opt,
                              Forward* reference = nullptr);

// Installs the StageHandoff (model/model.h) of this rank: init() does, under mpirun.
void install_handoff();

// Rank 0 at the end of the job (finish()): tells every other rank to stop.
void stop_workers();
// "layers [b, e) of L" for this rank's stage (stage_of), or "no stage" before one was chosen.
std::string stage_report();

}  // namespace sinkq::dist
