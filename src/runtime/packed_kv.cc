// sinkq/runtime/packed_kv.cc — KvScheme -> KV format and calibrated params, the PackedKvStore
// (a model/kv_store.h KvStore over lowbit::PackedKvCache) and attach_packed_kv.
#include "runtime/packed_kv.h"

#include <fmt/format.h>

#include <map>

#include "core/error.h"
#include "quant/hadamard.h"

namespace sinkq::runtime {

namespace {

quant::Granularity granularity_of(const KvScheme& s) { return quant::kv_granularity(s.mode, s.granularity); }

bool kv_site(Site s) { return s == Site::K || s == Site::V; }

}  // namespace

void KvScheme::validate() const {
  SINKQ_CHECK(bits != quant::kBitsOff, "packed KV: bits = 16 means the KV cache is not quantized; keep the fp32 cache");
  SINKQ_CHECK(bits == 8 || bits == 4,
              "packed KV: int{} is not a packed KV format (the kernels store int8 and int4 codes; the simulator "
              "can still evaluate int{})",
              bits, bits);
  const bool dyn = mode == quant::KvMode::Dynamic;
  SINKQ_CHECK(!dyn || granularity != quant::KvGranularity::Tensor,
              "packed KV: a dynamic per-tensor KV scale would change with every chunk (use per-token or per-head, "
              "or static per-tensor)");
  SINKQ_CHECK(dyn || granularity != quant::KvGranularity::Token,
              "packed KV: static KV scales are per head or per tensor (per-token scales are dynamic)");
  bool any_kv = false;
  for (const quant::StaticQuant& q : statics) any_kv |= kv_site(q.site);
  SINKQ_CHECK(!dyn || !any_kv, "packed KV: dynamic KV takes no static k / v params (scales come from each row)");
}

std::string KvScheme::describe() const {
  const std::string gran = granularity == quant::KvGranularity::Head    ? "per-head"
                           : granularity == quant::KvGranularity::Token ? "per-token"
                                                                        : "per-tensor";
  return fmt::format("KV{} {} {} {} ({})", bits, quant::kv_mode_name(mode), gran, symmetric ? "sym" : "asym",
                     lowbit::kv_traits(kv_format(*this)).name);
}

KvScheme KvScheme::from_sim(const quant::KvSim& kv, const std::vector<quant::StaticQuant>& statics) {
  KvScheme s;
  s.bits = kv.bits;
  s.mode = kv.mode;
  s.granularity = kv.granularity;
  s.symmetric = kv.symmetric;
  if (kv.mode == quant::KvMode::Static)
    for (const quant::StaticQuant& q : statics)
      if (kv_site(q.site)) s.statics.push_back(q);
  return s;
}

lowbit::PackedFormat kv_format(const KvScheme& s) {
  s.validate();
  return lowbit::kv_format(s.bits, s.symmetric, granularity_of(s));
}

namespace {

lowbit::PackedKvCache make_cache(const ModelConfig& c, int64_t capacity, const KvScheme& s) {
  const lowbit::PackedFormat f = kv_format(s);
  const lowbit::FormatDesc& t = lowbit::kv_traits(f);
  std::vector<quant::Params> pk, pv;
  if (!t.dynamic()) {
    std::map<std::pair<int, int>, const quant::StaticQuant*> by;
    for (const quant::StaticQuant& q : s.statics) {
      if (!kv_site(q.site)) continue;
      SINKQ_CHECK(q.layer >= 0 && q.layer < c.num_layers, "packed KV: static {} params for layer {} (the model has {})",
                  site_name(q.site), q.layer, c.num_layers);
      SINKQ_CHECK(by.emplace(std::pair{q.layer, int(q.site)}, &q).second,
                  "packed KV: two static params for site {} of layer {}", site_name(q.site), q.layer);
      SINKQ_CHECK(q.spec.bits == t.bits && q.spec.symmetric == t.symmetric && q.spec.granularity == t.granularity &&
                      (t.granularity != quant::Granularity::PerHeadShared || q.spec.head_dim == c.head_dim),
                  "packed KV: the static quantizer of site {} of layer {} is {}, the scheme needs {} {}",
                  site_name(q.site), q.layer, quant::describe(q.spec), t.name,
                  quant::describe(lowbit::kv_spec(f, c.head_dim)));
    }
    for (int l = 0; l < c.num_layers; ++l) {
      for (Site site : {Site::K, Site::V}) {
        const auto it = by.find({l, int(site)});
        SINKQ_CHECK(it != by.end(),
                    "packed KV: static KV needs calibrated params for site {} of layer {} (build_sim --kv-quant "
                    "static --calib, or a Calibrator)",
                    site_name(site), l);
        (site == Site::K ? pk : pv).push_back(it->second->params);
      }
    }
  }
  return lowbit::PackedKvCache(f, c.num_layers, c.num_kv_heads, c.head_dim, capacity, std::move(pk), std::move(pv));
}

}  // namespace

PackedKvStore::PackedKvStore(const ModelConfig& c, int64_t capacity, const KvScheme& s)
    : cache_(make_cache(c, capacity, s)), describe_(s.describe()) {}

void PackedKvStore::write(int layer, int64_t row0, const float* k, const float* v, int64_t T) {
  cache_.store(layer, row0, k, v, T);
}

void PackedKvStore::attention(int layer, const AttnShape& s, const float* q, const KvSegment& prefix, int64_t n_past,
                              int64_t T, float* out) const {
  lowbit::attention_packed(s, q, prefix, cache_, layer, n_past, T, out);
}

void attach_packed_kv(Forward& fwd, const KvScheme& scheme) {
  fwd.set_kv_store(std::make_unique<PackedKvStore>(fwd.model().config(), fwd.body_capacity(), scheme));
}

CodebookKvScheme CodebookKvScheme::from_sim(const quant::SimModel& sm) {
  SINKQ_CHECK(sm.cfg.kv.vector(), "codebook KV: the recipe's KV quantizer is not a codebook (kv.codebook int)");
  CodebookKvScheme s;
  s.key_pre_rope = sm.cfg.kv.key_pre_rope;
  s.r3 = sm.cfg.rotate.on;
  s.layers = sm.kvq;
  return s;
}

lowbit::CodebookKvCache codebook_cache(const ModelConfig& c, int64_t capacity, const CodebookKvScheme& s) {
  SINKQ_CHECK(int(s.layers.size()) == c.num_layers, "codebook KV: quantizers for {} layers, the model has {}",
              s.layers.size(), c.num_layers);
  std::vector<formats::nuq::Codec> k, v;
  for (const quant::KvQuantLayer& l : s.layers) k.push_back(l.k), v.push_back(l.v);
  return lowbit::CodebookKvCache(c.num_layers, c.kv_dim(), capacity, std::move(k), std::move(v));
}

CodebookKvStore::CodebookKvStore(const Model& m, int64_t capacity, const CodebookKvScheme& s)
    : cache_(codebook_cache(m.config(), capacity, s)),
      rope_(&m.rope()),
      kv_heads_(m.config().num_kv_heads),
      head_dim_(m.config().head_dim),
      pre_rope_(s.key_pre_rope),
      r3_(s.r3) {
  cache_.rows(0, false, 0, head_dim_);  // the kernels' head slices: throws when not byte-aligned
}

std::string CodebookKvStore::describe() const {
  return fmt::format("KV{} codebook (keys {} RoPE{}; b-bit indices, fp16 outliers CSR by token)", cache_.bits(),
                     pre_rope_ ? "before" : "after", pre_rope_ && r3_ ? ", R3 after decoding" : "");
}

void CodebookKvStore::write(int layer, int64_t row0, const float* k, const float* v, int64_t T) {
  cache_.store(layer, row0, k, v, T);
}

void CodebookKvStore::attention(int layer, const AttnShape& s, const float* q, const KvSegment& prefix,
                                int64_t n_past, int64_t T, float* out) const {
  const int64_t n = n_past + T, KV = cache_.kv_dim();
  if (pre_rope_) {
    // cos | sin of every position seen so far, computed once (rope_cos_sin: rope_apply's values).
    const int64_t need = prefix.rows + n, have = int64_t(cs_.size()) / head_dim_;
    if (need > have) {
      cs_.resize(size_t(need * head_dim_));
      for (int64_t p = have; p < need; ++p) rope_cos_sin(*rope_, int32_t(p), cs_.data() + p * head_dim_);
    }
  }
  if (T < kFusedMaxT) {
    // Decode steps: the fused LUT kernels read the packed rows directly. A rotated model's q
    // carries R3 (its q hook), the body keys get RoPE only: un-rotate q once for them (H is its
    // own inverse).
    // The prefix keys keep R3: they are scored with q as it comes.
    const float* qb = q;
    if (pre_rope_ && r3_) {
      q_.assign(q, q + T * s.n_heads * head_dim_);
      quant::fwht_inplace(q_.data(), T * s.n_heads, head_dim_);
      qb = q_.data();
    }
    lowbit::attention_codebook(s, q, qb, prefix, cache_, layer, n_past, T, pre_rope_ ? cs_.data() : nullptr, out);
    return;
  }
  // Prefill chunks: decode the rows once into fp32 and run the fp32 kernel (the simulator's values
  // bit for bit; the fused kernels would decode every row once per query token).
  k_.resize(size_t(n * KV));
  v_.resize(size_t(n * KV));
  cache_.dequantize(layer, false, n, k_.data());
  cache_.dequantize(layer, true, n, v_.data());
  if (pre_rope_) {
    // What the simulator's Forward does after its k_pre_rope hook: RoPE at each row's absolute
    // position, then the k-site R3 when the model is rotated (both per row: the same bits).
    rope_apply_cs(cs_.data() + prefix.rows * head_dim_, head_dim_, k_.data(), n, kv_heads_);
    if (r3_) quant::fwht_inplace(k_.data(), n * kv_heads_, head_dim_);
  }
  sinkq::attention(s, q, prefix, k_.data(), v_.data(), n_past, T, out);
}

void attach_codebook_kv(Forward& fwd, const CodebookKvScheme& scheme) {
  fwd.set_kv_store(std::make_unique<CodebookKvStore>(fwd.model(), fwd.body_capacity(), scheme));
}

}  // namespace sinkq::runtime
