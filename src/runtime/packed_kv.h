// sinkq/runtime/packed_kv.h — the real quantized KV cache of the forward pass: the body stored
// int8 / int4 (lowbit/kv_kernels.h PackedKvCache), attention over [fp32 prefix; packed body].
//
// attach_packed_kv(fwd, scheme) gives a Forward a PackedKvStore (model/kv_store.h) of the same
// capacity in place of its fp32 KVCache (whose max_ctx rows are never allocated again). New K/V
// rows are computed in fp32 scratch, pass the k / v site hooks (online rotations such as R3 run
// there, before storage), and are quantized into the store with the one quantizer
// (formats/quantizer.h) — the codes and scales the simulator's KV hooks (quant/sim.h KvSim) produce
// when they fake-quantize the fp32 cache. The KV prefix (model/kv_prefix.h) stays fp32 and is
// never quantized; reset() keeps it.
//
// Scheme -> format (formats/packed_format.h kKvFormats):
//   dynamic per head   kv{8,4}_per_head[_asym]       (sim: --kv-quant dynamic --kv-gran head)
//   dynamic per token  kv{8,4}_per_token[_asym]      (--kv-gran token)
//   static per head    kv{8,4}_static_head[_asym]    (--kv-quant static --kv-gran head)
//   static per tensor  kv{8,4}_static_tensor[_asym]  (--kv-gran tensor)
// Anything else (other bit widths, int4 with an odd head_dim, missing or mismatched static params)
// is a sinkq::Error that says what and why: never a fallback to fp32 or to simulation.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "lowbit/codebook_kv.h"
#include "lowbit/formats.h"
#include "lowbit/kv_kernels.h"
#include "model/kv_store.h"
#include "model/model.h"
#include "quant/sim.h"

namespace sinkq::runtime {

struct KvScheme {
  int bits = 8;                                                   // 8 or 4
  quant::KvMode mode = quant::KvMode::Dynamic;
  quant::KvGranularity granularity = quant::KvGranularity::Head;  // dynamic: token | head;
                                                                  // static: head | tensor
  bool symmetric = true;
  // Static only: the calibrated quantizers of sites k and v, exactly one per (layer, site) for
  // every layer (e.g. quant::SimModel::statics; entries of other sites are ignored). Their spec
  // must be this scheme's (bits, symmetry, per_head_shared / per_tensor); the clip ratio is
  // already in the params.
  std::vector<quant::StaticQuant> statics;

  // Throws sinkq::Error saying what the packed cache cannot run (model-dependent checks are made
  // when the store is built).
  void validate() const;
  std::string describe() const;  // e.g. "KV4 dynamic per-head sym (kv4_per_head)"
  // The KV part of a simulator config (bits, mode, granularity, symmetry) with its calibrated
  // statics (entries of sites other than k / v are dropped).
  static KvScheme from_sim(const quant::KvSim& kv, const std::vector<quant::StaticQuant>& statics = {});
};

// The KV format of a scheme (validates it).
lowbit::PackedFormat kv_format(const KvScheme& s);

class PackedKvStore final : public KvStore {
 public:
  // A body of `capacity` rows for model config `c` (throws sinkq::Error as described above).
  // `held`: the layers whose rows it keeps (a pipeline stage's, Model::stage(); default all).
  PackedKvStore(const ModelConfig& c, int64_t capacity, const KvScheme& s, LayerRange held = {});

  int num_layers() const override { return cache_.num_layers(); }
  int64_t kv_dim() const override { return cache_.kv_dim(); }
  int64_t capacity() const override { return cache_.capacity(); }
  size_t bytes() const override { return cache_.bytes(); }
  std::string describe() const override { return describe_; }
  void write(int layer, int64_t row0, const float* k, const float* v, int64_t T) override;
  void attention(int layer, const AttnShape& s, const float* q, const KvSegment& prefix, int64_t n_past,
                 int64_t T, float* out) const override;
  const lowbit::PackedKvCache& cache() const { return cache_; }

 private:
  lowbit::PackedKvCache cache_;
  std::string describe_;
  // Decode steps (T < kFusedMaxT) run the packed attention driver on the stored rows; prefill
  // chunks decode the rows once into fp32 scratch and run the fp32 kernel (blocked, sgemm): the
  // simulator's logits bit for bit, for one layer's fp32 scratch (as CodebookKvStore) — while
  // that scratch stays under kDecodedMaxBytes (e.g. 32K rows on the 1B shape); longer contexts
  // keep the packed driver, so the cache's memory saving holds at any length.
  static constexpr int64_t kFusedMaxT = 8;
  static constexpr int64_t kDecodedMaxBytes = int64_t(64) << 20;
  mutable std::vector<float> k_, v_;
};

// KVQuant's packed KV body (lowbit/codebook_kv.h): the per-layer K / V codebook quantizers of a
// simulator recipe with kv.codebook != int (quant/kvquant.h), stored as b-bit indices, token
// ranges and fp16 outliers. Keys coded before RoPE (kv.keys pre_rope_*) are written before RoPE
// (KvStore::keys_before_rope) and get RoPE in attention(), after decoding. Decode steps (T <
// kFusedMaxT new rows) run the fused LUT kernels (lowbit::attention_codebook) on the packed rows:
// the simulator's values up to the fp32 summation order (R3 of a rotated model moves to q: q is
// un-rotated once). Prefill chunks decode the rows once into fp32 scratch, apply RoPE and R3 as
// the simulator's k-site hook does, and run the fp32 attention kernel: the simulator's logits bit
// for bit, for one layer's fp32 scratch.
//
// With a recent window (scheme.recent = W > 0, recipe kv.recent): the W most recent rows are also
// held as int8 (per token and KV head, symmetric: lowbit kv8_per_head, the one int quantizer) in a
// ring of W rows per layer, and a query at body position t attends rows t−W+1..t in int8 and older rows in
// the codebook — per query, in prefill chunks too (the int8 rows of a chunk are kept beside it for
// its attention). Within a softmax the order of the rows does not matter, so the recent rows join
// the fp32 prefix segment (RoPE and R3 applied as to the prefix keys); a sliding-window model is
// refused (the window would need the positions in order).
struct CodebookKvScheme {
  bool key_pre_rope = true;
  bool r3 = false;  // rotation on: R3 (per-head H/√head_dim) after RoPE on decoded pre-RoPE keys
  int recent = 0;   // W: the most recent W rows in int8 (0: off)
  std::vector<quant::KvQuantLayer> layers;
  static CodebookKvScheme from_sim(const quant::SimModel& sm);
};

// The packed body of a scheme for model config `c` (throws when the quantizers do not fit it).
lowbit::CodebookKvCache codebook_cache(const ModelConfig& c, int64_t capacity, const CodebookKvScheme& s,
                                       LayerRange held = {});

class CodebookKvStore final : public KvStore {
 public:
  CodebookKvStore(const Model& m, int64_t capacity, const CodebookKvScheme& s);
  int num_layers() const override { return cache_.num_layers(); }
  int64_t kv_dim() const override { return cache_.kv_dim(); }
  int64_t capacity() const override { return cache_.capacity(); }
  size_t bytes() const override { return cache_.bytes() + (ring_ ? ring_->bytes() : 0); }
  std::string describe() const override;
  bool keys_before_rope() const override { return pre_rope_; }
  // The recent window's ring holds the last W rows written, so a rewind would read rows it no
  // longer has; without a window the codebook body drops what lies past the row written.
  bool rewindable() const override { return !ring_; }
  void write(int layer, int64_t row0, const float* k, const float* v, int64_t T) override;
  void attention(int layer, const AttnShape& s, const float* q, const KvSegment& prefix, int64_t n_past,
                 int64_t T, float* out) const override;
  const lowbit::CodebookKvCache& cache() const { return cache_; }

 private:
  lowbit::CodebookKvCache cache_;
  const Model* model_;  // its RoPE tables (Gemma 3: two, per layer)
  int kv_heads_, head_dim_;
  bool pre_rope_, r3_;
  static constexpr int64_t kFusedMaxT = 8;
  // Keys as the attention sees them: RoPE at absolute positions pos0.. and R3 when rotated.
  void rope_r3(int layer, float* k, int64_t n, int64_t pos0) const;
  const float* cs(int layer) const { return cs_[model_->config().local_rope(layer)].data(); }
  void attention_recent(int layer, const AttnShape& s, const float* q, const KvSegment& prefix, int64_t n_past,
                        int64_t T, float* out) const;
  mutable std::vector<float> k_, v_;  // one layer's decoded rows (prefill)
  mutable std::vector<float> q_;      // q un-rotated (R3, decode)
  // Recent window: the int8 ring, and the int8 rows of the last write (with the ring's rows before
  // it): rows [recent_row0_, recent_row0_ + recent_rows_) of layer recent_layer_, fp32 [rows, kv_dim].
  int recent_ = 0;
  std::unique_ptr<lowbit::PackedKvCache> ring_;
  std::vector<float> rk_, rv_;
  mutable std::vector<float> rk_rot_;  // rk_ with RoPE (+ R3), per attention call
  int recent_layer_ = -1;
  int64_t recent_row0_ = 0, recent_rows_ = 0;
  mutable std::vector<float> seg_k_, seg_v_;  // [prefix; recent rows] of one query
  // RoPE cos | sin rows of absolute positions 0.., [positions, head_dim]: of the model's RoPE, and
  // of Gemma 3's local one.
  mutable std::array<std::vector<float>, 2> cs_;
};

// Replaces fwd's body cache by a CodebookKvStore of the same capacity (between sequences).
void attach_codebook_kv(Forward& fwd, const CodebookKvScheme& scheme);

// Replaces fwd's body cache by a PackedKvStore of the same capacity (Forward::set_kv_store: only
// between sequences). The Forward's hooks are untouched.
void attach_packed_kv(Forward& fwd, const KvScheme& scheme);

}  // namespace sinkq::runtime
