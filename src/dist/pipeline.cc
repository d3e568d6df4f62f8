// sinkq/dist/pipeline.cc — the layer partition, rank 0's StageLink, the workers of the later stages
// and the pipelined perplexity (pipeline.h).
#include "dist/pipeline.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <array>
#include <map>

#include "core/error.h"
#include "dist/mpi.h"
#include "io/gguf.h"
#include "io/safetensors.h"

namespace sinkq::dist {

namespace {

// The messages between stages: a fixed header, then for Step the token ids and targets [2T]
// (int32) and the activations [T, hidden] (fp32); the last stage answers rank 0 with logits or a
// window's NLL sum. MPI keeps the order of messages between two ranks with one tag.
enum class Op : int64_t { Step = 1, Close = 2, Stop = 3, OpenReference = 4 };
// Score: the window's NLL sum (and with a kept reference, its KL sum) to rank 0 at its end;
// KeepReference: the reference model's logits of the window kept on the last stage for that.
enum class Want : int64_t { Nothing = 0, Logits = 1, Score = 2, KeepReference = 3 };
constexpr int64_t kMagic = 0x73696e6b712d7070;  // "sinkq-pp"

struct Header {
  int64_t magic = kMagic;
  Op op = Op::Step;
  int64_t model = 0;  // 0: the engine's model, 1: its full-precision reference (--kld)
  int64_t session = 0, capacity = 0, max_batch = 0;
  int64_t body_past = 0, T = 0, first_row = 0;
  Want want = Want::Nothing;
  int64_t window_end = 0;  // Score: the window's sum goes to rank 0 after this chunk
};
static_assert(sizeof(Header) == 88);

void send_header(const Header& h, int dest) { send(&h, sizeof h, dest, kTagHeader, "a chunk's header"); }

// Bytes of the tensors of a file set by stage: "model.layers.N." / "blk.N." to layer N, the
// embedding table to the first stage (and the last when tied), the rest to the last stage.
struct Classifier {
  LayerBytes b;
  bool tied = false;
  void add(const std::string& name, int64_t bytes) {
    if (const int l = tensor_layer(name); l >= 0) {
      if (l < int(b.layers.size())) b.layers[size_t(l)] += bytes;
      return;
    }
    const bool embed = name.find("embed_tokens") != std::string::npos || name.rfind("token_embd", 0) == 0;
    if (embed) {
      b.first += bytes;
      if (tied) b.last += bytes;
    } else {
      b.last += bytes;
    }
  }
};

int next_rank() { return rank() + 1; }
bool last_rank() { return rank() == size() - 1; }

}  // namespace

LayerBytes layer_bytes(const std::string& path) {
  Classifier c;
  if (GgufFile::looks_like_gguf(path)) {
    auto g = GgufFile::open(path);
    const ModelConfig cfg = model_config_from_gguf(*g);
    c.b.layers.assign(size_t(cfg.num_layers), 0);
    c.tied = cfg.tie_word_embeddings;
    for (const GgufTensor& t : g->tensors()) c.add(t.name, t.numel() * 4);  // dequantized to fp32
    return c.b;
  }
  const ModelConfig cfg = model_config_of(path);
  c.b.layers.assign(size_t(cfg.num_layers), 0);
  c.tied = cfg.tie_word_embeddings;
  // A sinkq artifact (runtime/artifact.h: sinkq_recipe.json + model.safetensors, raw integer
  // tensors) or an HF directory.
  const bool artifact = std::filesystem::is_regular_file(path + "/sinkq_recipe.json");
  const TensorStore store = artifact ? TensorStore::open_files({path + "/model.safetensors"}, /*allow_raw=*/true)
                                     : TensorStore::open_dir(path);
  for (const TensorInfo* t : store.all()) c.add(t->name, int64_t(t->nbytes));
  return c.b;
}

std::vector<LayerRange> partition_layers(const LayerBytes& b, int ranks) {
  const int L = int(b.layers.size());
  SINKQ_CHECK(ranks >= 1, "a pipeline of {} stages", ranks);
  SINKQ_CHECK(ranks <= L, "mpirun -np {}: the model has {} layers, so at most {} ranks can each hold a stage of at least "
              "one layer", ranks, L, L);
  // cost[s][i]: the least possible largest stage when layers [0, i) form stages 0..s (s + 1 stages),
  // stage s ending at i; stage bytes include the first / last ends.
  std::vector<int64_t> prefix(size_t(L) + 1, 0);
  for (int i = 0; i < L; ++i) prefix[size_t(i) + 1] = prefix[size_t(i)] + b.layers[size_t(i)];
  auto bytes = [&](int s, int begin, int end) {
    return prefix[size_t(end)] - prefix[size_t(begin)] + (s == 0 ? b.first : 0) + (s == ranks - 1 ? b.last : 0);
  };
  constexpr int64_t kInf = std::numeric_limits<int64_t>::max();
  std::vector<std::vector<int64_t>> cost(size_t(ranks), std::vector<int64_t>(size_t(L) + 1, kInf));
  std::vector<std::vector<int>> from(size_t(ranks), std::vector<int>(size_t(L) + 1, -1));
  for (int i = 1; i <= L; ++i) cost[0][size_t(i)] = bytes(0, 0, i);
  for (int s = 1; s < ranks; ++s)
    for (int i = s + 1; i <= L; ++i)
      for (int j = s; j < i; ++j) {  // stage s = [j, i)
        if (cost[size_t(s - 1)][size_t(j)] == kInf) continue;
        const int64_t c = std::max(cost[size_t(s - 1)][size_t(j)], bytes(s, j, i));
        if (c < cost[size_t(s)][size_t(i)]) {
          cost[size_t(s)][size_t(i)] = c;
          from[size_t(s)][size_t(i)] = j;
        }
      }
  std::vector<LayerRange> out(static_cast<size_t>(ranks));
  int end = L;
  for (int s = ranks - 1; s >= 0; --s) {
    const int begin = s == 0 ? 0 : from[size_t(s)][size_t(end)];
    out[size_t(s)] = LayerRange{begin, end};
    end = begin;
  }
  return out;
}

namespace {
std::string g_stage = "no stage";
}  // namespace

LayerRange stage_of(const std::string& path, bool report) {
  if (!active()) return LayerRange::all();
  const LayerBytes b = layer_bytes(path);
  const std::vector<LayerRange> stages = partition_layers(b, size());
  const LayerRange& mine = stages[size_t(rank())];
  if (!report) return mine;
  int64_t bytes = b.layers.empty() ? 0 : (rank() == 0 ? b.first : 0) + (rank() == size() - 1 ? b.last : 0);
  for (int l = mine.begin; l < mine.end; ++l) bytes += b.layers[size_t(l)];
  g_stage = fmt::format("layers [{}, {}) of {}, {:.1f} MiB of weights", mine.begin, mine.end, b.layers.size(),
                        double(bytes) / (1 << 20));
  return mine;
}

std::string stage_report() { return g_stage; }

// ---- rank 0 ----

namespace {

int64_t g_next_session = 1;

class Link final : public StageLink {
 public:
  Link(int model, int64_t capacity, int64_t max_batch, int64_t hidden, int64_t vocab)
      : model_(model), session_(g_next_session++), capacity_(capacity), max_batch_(max_batch), hidden_(hidden),
        vocab_(vocab) {}
  ~Link() override {
    if (!active()) return;
    Header h;
    h.op = Op::Close;
    h.session = session_;
    try {
      send_header(h, 1);
    } catch (const Error& e) {
      abort_all(e.what());
    }
  }

  void forward(std::span<const int32_t> tokens, int64_t body_past, const float* x, int64_t first_row,
               float* logits_out) override {
    Header h;
    h.model = model_;
    h.session = session_;
    h.capacity = capacity_;
    h.max_batch = max_batch_;
    h.body_past = body_past;
    h.T = int64_t(tokens.size());
    std::vector<int32_t> ids(tokens.begin(), tokens.end());
    ids.resize(2 * tokens.size(), -1);
    if (window_) {
      // Perplexity: every row's logits as perplexity()'s all_logits step computes them; the last
      // stage adds the NLL of each scored target in order and answers once per window.
      h.want = keep_ ? Want::KeepReference : Want::Score;
      h.first_row = 0;
      const std::vector<int32_t>& w = *window_;
      for (int64_t t = 0; t < h.T; ++t) {
        const int64_t p = body_past + t;
        if (p >= first_scored_ && p + 1 < int64_t(w.size())) ids[size_t(h.T + t)] = w[size_t(p + 1)];
      }
      h.window_end = body_past + h.T == int64_t(w.size());
    } else {
      h.want = logits_out ? Want::Logits : Want::Nothing;
      h.first_row = first_row;
    }
    send_header(h, 1);
    send(ids.data(), ids.size() * sizeof(int32_t), 1, kTagIds, "a chunk's token ids");
    send(x, size_t(h.T * hidden_) * sizeof(float), 1, kTagX, "a chunk's activations");
    if (h.want == Want::Logits)
      recv(logits_out, size_t((h.T - first_row) * vocab_) * sizeof(float), size() - 1, kTagLogits, "logits");
  }

  // Perplexity windows: while set, chunks are scored on the last stage (pipeline_perplexity), or
  // (keep: the reference's) their logits kept there for the KL divergence of the next window.
  void score_window(const std::vector<int32_t>* w, int64_t first_scored, bool keep = false) {
    window_ = w;
    first_scored_ = first_scored;
    keep_ = keep;
  }

 private:
  int model_;
  int64_t session_, capacity_, max_batch_, hidden_, vocab_;
  bool keep_ = false;
  const std::vector<int32_t>* window_ = nullptr;
  int64_t first_scored_ = 0;
};

}  // namespace

std::shared_ptr<StageLink> make_link(const Forward& fwd, int model) {
  SINKQ_CHECK(active() && rank() == 0, "a pipeline link is rank 0's");
  const ModelConfig& c = fwd.model().config();
  return std::make_shared<Link>(model, fwd.body_capacity(), fwd.max_batch(), c.hidden_size, c.vocab_size);
}

void open_reference_on_workers() {
  SINKQ_CHECK(active() && rank() == 0, "open_reference_on_workers: rank 0's");
  Header h;
  h.op = Op::OpenReference;
  send_header(h, 1);
}

void stop_workers() {
  Header h;
  h.op = Op::Stop;
  send_header(h, 1);
}

PplResult pipeline_perplexity(Forward& fwd, const std::vector<int32_t>& toks, const PplOptions& opt,
                              Forward* reference) {
  auto* link = dynamic_cast<Link*>(fwd.link().get());
  SINKQ_CHECK(link != nullptr, "pipeline_perplexity: the Forward is not the first stage of a pipeline");
  Link* ref_link = reference ? dynamic_cast<Link*>(reference->link().get()) : nullptr;
  SINKQ_CHECK(!reference || ref_link != nullptr, "pipeline_perplexity: the reference is not a pipeline's first stage");
  check_ppl_forward(fwd, opt, reference);
  check_ppl_text(toks, opt);
  const auto windows = ppl_windows(toks, opt);
  const int64_t first = ppl_first_scored(opt);
  PplTotals totals(opt, int64_t(windows.size()));
  size_t got = 0;
  auto collect = [&] {
    double sums[2] = {0, 0};  // NLL, KL
    recv(sums, sizeof sums, size() - 1, kTagScore, "a window's NLL");
    totals.add(sums[0], int64_t(windows[got].size()) - 1 - first, reference ? &sums[1] : nullptr);
    ++got;
  };
  for (const auto& w : windows) {
    if (reference) {  // its logits first: the last stage keeps them for the window's KL
      ref_link->score_window(&w, first, /*keep=*/true);
      reference->reset();
      try {
        reference->step(w, /*all_logits=*/false);
      } catch (...) {
        ref_link->score_window(nullptr, 0);
        throw;
      }
      ref_link->score_window(nullptr, 0);
    }
    link->score_window(&w, first);
    fwd.reset();
    try {
      fwd.step(w, /*all_logits=*/false);
    } catch (...) {
      link->score_window(nullptr, 0);
      throw;
    }
    link->score_window(nullptr, 0);
    while (got < windows.size() && waiting(size() - 1, kTagScore)) collect();
  }
  while (got < windows.size()) collect();
  fwd.reset();
  if (reference) reference->reset();
  return totals.result();
}

// ---- layer-at-a-time work over the stages (model.h StageHandoff) ----

namespace {

class Handoff final : public StageHandoff {
 public:
  void receive(float* x, size_t n) override {
    recv(x, n * sizeof(float), rank() - 1, kTagStage, "a stage's input activations");
  }
  void send(const float* x, size_t n) override {
    dist::send(x, n * sizeof(float), rank() + 1, kTagStage, "a stage's output activations");
  }
  nlohmann::json gather_layers(nlohmann::json records) override {
    if (rank() > 0) {
      send_text(records.dump(), 0, kTagRecords, "a calibration report's layers");
      return records;
    }
    for (int r = 1; r < size(); ++r) {
      const nlohmann::json theirs = nlohmann::json::parse(recv_text(r, kTagRecords, "a calibration report's layers"));
      SINKQ_CHECK(theirs.is_array() && theirs.size() == records.size(), "rank {}: a calibration report of {} layers",
                  r, theirs.size());
      for (size_t l = 0; l < records.size(); ++l)
        if (!theirs[l].is_null()) records[l] = theirs[l];
    }
    return records;
  }
  nlohmann::json from_first(nlohmann::json j) override {
    if (rank() == 0) {
      const std::string s = j.dump();
      for (int r = 1; r < size(); ++r) send_text(s, r, kTagFromFirst, "rank 0's result");
      return j;
    }
    return nlohmann::json::parse(recv_text(0, kTagFromFirst, "rank 0's result"));
  }
};

}  // namespace

void install_handoff() { set_stage_handoff(std::make_shared<Handoff>()); }

// ---- the later stages ----

void worker(const MakeForward& make, const std::function<void()>& open_reference) {
  try {
    SINKQ_CHECK(active() && rank() > 0, "worker(): ranks after the first");
    const int prev = rank() - 1;
    std::map<int64_t, std::unique_ptr<Forward>> seqs;
    std::map<int64_t, std::array<double, 2>> sums;  // Score: a session's window's running NLL and KL sums
    std::vector<int32_t> ids;
    std::vector<float> x, logits, kept;  // kept: the reference's logits of the window (KeepReference)
    for (;;) {
      Header h;
      recv(&h, sizeof h, prev, kTagHeader, "the next chunk's header");
      SINKQ_CHECK(h.magic == kMagic, "rank {}: a message from rank {} is not a pipeline header", rank(), prev);
      if (h.op == Op::OpenReference) {  // collective: every stage loads its reference stage (--kld)
        if (!last_rank()) send_header(h, next_rank());
        open_reference();
        continue;
      }
      if (h.op == Op::Stop || h.op == Op::Close) {
        if (!last_rank()) send_header(h, next_rank());
        if (h.op == Op::Stop) break;
        seqs.erase(h.session);
        sums.erase(h.session);
        continue;
      }
      SINKQ_CHECK(h.op == Op::Step && h.T >= 1 && h.first_row >= 0 && h.first_row < h.T && h.capacity >= 1,
                  "rank {}: a malformed chunk header from rank {}", rank(), prev);
      std::unique_ptr<Forward>& f = seqs[h.session];
      if (!f) f = make(int(h.model), h.capacity, h.max_batch);
      SINKQ_CHECK(h.T <= f->max_batch() && h.body_past <= f->body_size(),
                  "rank {}: chunk of {} tokens at row {}, this stage's sequence holds {} rows (max_batch {})", rank(),
                  h.T, h.body_past, f->body_size(), f->max_batch());
      const ModelConfig& c = f->model().config();
      ids.resize(size_t(2 * h.T));
      x.resize(size_t(h.T * c.hidden_size));
      recv(ids.data(), ids.size() * sizeof(int32_t), prev, kTagIds, "a chunk's token ids");
      recv(x.data(), x.size() * sizeof(float), prev, kTagX, "a chunk's activations");
      for (int64_t t = 0; t < h.T; ++t)
        SINKQ_CHECK(ids[size_t(t)] >= 0 && ids[size_t(t)] < c.vocab_size, "rank {}: token id {} outside the vocabulary",
                    rank(), ids[size_t(t)]);
      // Rank 0 reset or rewound its sequence: the same here.
      if (h.body_past == 0) f->reset();
      else if (h.body_past < f->body_size()) f->truncate(h.body_past);
      const std::span<const int32_t> tokens(ids.data(), size_t(h.T));
      const bool head = last_rank() && h.want != Want::Nothing;
      if (head) logits.resize(size_t((h.T - h.first_row) * c.vocab_size));
      f->run_stage(tokens, x.data(), h.first_row, head ? logits.data() : nullptr);
      if (!last_rank()) {
        send_header(h, next_rank());
        send(ids.data(), ids.size() * sizeof(int32_t), next_rank(), kTagIds, "a chunk's token ids");
        send(x.data(), x.size() * sizeof(float), next_rank(), kTagX, "a chunk's activations");
      } else if (h.want == Want::Logits) {
        send(logits.data(), logits.size() * sizeof(float), 0, kTagLogits, "logits");
      } else if (h.want == Want::KeepReference) {
        // The reference's rows of this window at their positions, for the window's KL (below).
        const int64_t V = c.vocab_size;
        kept.resize(size_t((h.body_past + h.T) * V));
        std::copy(logits.begin(), logits.end(), kept.begin() + h.body_past * V);
      } else if (h.want == Want::Score) {
        // perplexity()'s sums: token_nll of each scored target and, after a kept reference window,
        // token_kld(reference, model) of its row, in order of position.
        std::array<double, 2>& sum = sums[h.session];
        const int64_t V = c.vocab_size;
        for (int64_t t = h.first_row; t < h.T; ++t)
          if (const int32_t target = ids[size_t(h.T + t)]; target >= 0 && target < V) {
            const float* row = logits.data() + (t - h.first_row) * V;
            sum[0] += token_nll(row, V, target);
            if (!kept.empty()) sum[1] += token_kld(kept.data() + (h.body_past + t) * V, row, V);
          }
        if (h.window_end) {
          send(sum.data(), sizeof(double) * 2, 0, kTagScore, "a window's NLL");
          sum = {0, 0};
          kept.clear();
        }
      }
    }
  } catch (const Error& e) {
    abort_all(e.what());
  } catch (const std::exception& e) {
    abort_all(e.what());
  }
  finish();
  std::exit(0);
}

}  // namespace sinkq::dist
