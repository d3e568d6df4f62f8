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

lowbit::PackedKvCache make_cache(const ModelConfig& c, int64_t capacity, const KvScheme& s, LayerRange held) {
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
  return lowbit::PackedKvCache(f, c.num_layers, c.num_kv_heads, c.head_dim, capacity, std::move(pk), std::move(pv),
                               held.begin, held.end_of(c.num_layers));
}

}  // namespace

PackedKvStore::PackedKvStore(const ModelConfig& c, int64_t capacity, const KvScheme& s, LayerRange held)
    : cache_(make_cache(c, capacity, s, held)), describe_(s.describe()) {}

void PackedKvStore::write(int layer, int64_t row0, const float* k, const float* v, int64_t T) {
  cache_.store(layer, row0, k, v, T);
}

void PackedKvStore::attention(int layer, const AttnShape& s, const float* q, const KvSegment& prefix, int64_t n_past,
                              int64_t T, float* out) const {
  const int64_t n = n_past + T, KV = cache_.kv_dim();
  if (T < kFusedMaxT || 8 * n * KV > kDecodedMaxBytes)
    return lowbit::attention_packed(s, q, prefix, cache_, layer, n_past, T, out);
  k_.resize(size_t(n * KV));
  v_.resize(size_t(n * KV));
  cache_.dequantize(layer, false, 0, n, k_.data());
  cache_.dequantize(layer, true, 0, n, v_.data());
  sinkq::attention(s, q, prefix, k_.data(), v_.data(), n_past, T, out);
}

void attach_packed_kv(Forward& fwd, const KvScheme& scheme) {
  fwd.set_kv_store(
      std::make_unique<PackedKvStore>(fwd.model().config(), fwd.body_capacity(), scheme, fwd.model().stage()));
}

CodebookKvScheme CodebookKvScheme::from_sim(const quant::SimModel& sm) {
  SINKQ_CHECK(sm.cfg.kv.vector(), "codebook KV: the recipe's KV quantizer is not a codebook (kv.codebook int)");
  CodebookKvScheme s;
  s.key_pre_rope = sm.cfg.kv.key_pre_rope;
  s.r3 = sm.cfg.rotate.on;
  s.recent = sm.cfg.kv.recent;
  s.layers = sm.kvq;
  return s;
}

lowbit::CodebookKvCache codebook_cache(const ModelConfig& c, int64_t capacity, const CodebookKvScheme& s,
                                       LayerRange held) {
  SINKQ_CHECK(int(s.layers.size()) == c.num_layers, "codebook KV: quantizers for {} layers, the model has {}",
              s.layers.size(), c.num_layers);
  std::vector<formats::nuq::Codec> k, v;
  for (const quant::KvQuantLayer& l : s.layers) k.push_back(l.k), v.push_back(l.v);
  return lowbit::CodebookKvCache(c.num_layers, c.kv_dim(), capacity, std::move(k), std::move(v), held.begin,
                                 held.end_of(c.num_layers));
}

CodebookKvStore::CodebookKvStore(const Model& m, int64_t capacity, const CodebookKvScheme& s)
    : cache_(codebook_cache(m.config(), capacity, s, m.stage())),
      model_(&m),
      kv_heads_(m.config().num_kv_heads),
      head_dim_(m.config().head_dim),
      pre_rope_(s.key_pre_rope),
      r3_(s.r3),
      recent_(s.recent) {
  cache_.rows(0, false, 0, head_dim_);  // the kernels' head slices: throws when not byte-aligned
  SINKQ_CHECK(recent_ >= 0, "codebook KV: recent window of {} rows", recent_);
  if (recent_ > 0) {
    SINKQ_CHECK(m.config().sliding_window == 0,  // any layer's
                "--kv-recent: the model attends a sliding window of {} tokens; the recent int8 window is built for "
                "full attention",
                m.config().sliding_window);
    ring_ = std::make_unique<lowbit::PackedKvCache>(lowbit::PackedFormat::KV8_PerHead, m.config().num_layers, kv_heads_,
                                                    head_dim_, std::min<int64_t>(recent_, capacity));
  }
}

std::string CodebookKvStore::describe() const {
  return fmt::format("KV{} codebook (keys {} RoPE{}; b-bit indices, fp16 outliers CSR by token){}", cache_.bits(),
                     pre_rope_ ? "before" : "after", pre_rope_ && r3_ ? ", R3 after decoding" : "",
                     ring_ ? fmt::format(", the recent {} rows in int8", recent_) : "");
}

void CodebookKvStore::write(int layer, int64_t row0, const float* k, const float* v, int64_t T) {
  const int64_t before = ring_ ? cache_.rows_written(layer) : 0;
  cache_.store(layer, row0, k, v, T);
  if (!ring_) return;
  // The int8 rows this write's attention needs: the ring's rows [row0 − W + 1, row0) (written
  // before), then this chunk's rows, each quantized into its ring slot and read back at once (a
  // later row of the same chunk may take the slot).
  const int64_t W = ring_->capacity(), KV = cache_.kv_dim();
  const int64_t r0 = std::max<int64_t>(0, row0 - (W - 1));
  SINKQ_CHECK(row0 == 0 || before <= row0 + 1,
              "codebook KV with --kv-recent: rewriting from row {} after {} rows were written would read int8 rows "
              "the ring no longer holds",
              row0, before);
  recent_layer_ = layer;
  recent_row0_ = r0;
  recent_rows_ = row0 + T - r0;
  rk_.resize(size_t(recent_rows_ * KV));
  rv_.resize(size_t(recent_rows_ * KV));
  for (int64_t r = r0; r < row0; ++r) {
    ring_->dequantize(layer, false, r % W, 1, rk_.data() + (r - r0) * KV);
    ring_->dequantize(layer, true, r % W, 1, rv_.data() + (r - r0) * KV);
  }
  for (int64_t t = 0; t < T; ++t) {
    const int64_t r = row0 + t;
    ring_->store(layer, r % W, k + t * KV, v + t * KV, 1);
    ring_->dequantize(layer, false, r % W, 1, rk_.data() + (r - r0) * KV);
    ring_->dequantize(layer, true, r % W, 1, rv_.data() + (r - r0) * KV);
  }
}

void CodebookKvStore::rope_r3(int layer, float* k, int64_t n, int64_t pos0) const {
  if (!pre_rope_) return;  // keys stored after RoPE (and after the k-site hook): as they are
  // What the simulator's Forward does after its k_pre_rope hook: RoPE at each row's absolute
  // position, then the k-site R3 when the model is rotated (both per row: the same bits).
  rope_apply_cs(cs(layer) + pos0 * head_dim_, head_dim_, k, n, kv_heads_);
  if (r3_) quant::fwht_inplace(k, n * kv_heads_, head_dim_);
}

void CodebookKvStore::attention(int layer, const AttnShape& s, const float* q, const KvSegment& prefix,
                                int64_t n_past, int64_t T, float* out) const {
  const int64_t n = n_past + T, KV = cache_.kv_dim();
  if (pre_rope_) {
    // cos | sin of every position seen so far, computed once (rope_cos_sin: rope_apply's values).
    std::vector<float>& cs = cs_[model_->config().local_rope(layer)];
    const int64_t need = prefix.rows + n, have = int64_t(cs.size()) / head_dim_;
    if (need > have) {
      cs.resize(size_t(need * head_dim_));
      for (int64_t p = have; p < need; ++p) rope_cos_sin(model_->rope(layer), int32_t(p), cs.data() + p * head_dim_);
    }
  }
  if (ring_) return attention_recent(layer, s, q, prefix, n_past, T, out);
  if (T < kFusedMaxT) {
    // Decode steps: the fused LUT kernels read the packed rows directly. A rotated model's q
    // carries R3 (its q hook), the body keys get RoPE only: un-rotate q once for them (H is its
    // own inverse). The prefix keys keep R3: they are scored with q as it comes.
    const float* qb = q;
    if (pre_rope_ && r3_) {
      q_.assign(q, q + T * s.n_heads * head_dim_);
      quant::fwht_inplace(q_.data(), T * s.n_heads, head_dim_);
      qb = q_.data();
    }
    lowbit::attention_codebook(s, q, qb, prefix, cache_, layer, n_past, T,
                               pre_rope_ ? cs(layer) + prefix.rows * head_dim_ : nullptr, out);
    return;
  }
  // Prefill chunks: decode the rows once into fp32 and run the fp32 kernel (the simulator's values
  // bit for bit; the fused kernels would decode every row once per query token).
  k_.resize(size_t(n * KV));
  v_.resize(size_t(n * KV));
  cache_.dequantize(layer, false, n, k_.data());
  cache_.dequantize(layer, true, n, v_.data());
  rope_r3(layer, k_.data(), n, prefix.rows);
  sinkq::attention(s, q, prefix, k_.data(), v_.data(), n_past, T, out);
}

// Per query t (body position n_past + i): rows [0, old) coded, rows [old, t] (m of them) int8.
// The int8 rows are decoded keys with RoPE and R3 as the prefix's, so they join the prefix segment
// (a softmax does not depend on the order of its rows; no sliding window here).
void CodebookKvStore::attention_recent(int layer, const AttnShape& s, const float* q, const KvSegment& prefix,
                                       int64_t n_past, int64_t T, float* out) const {
  const int64_t n = n_past + T, KV = cache_.kv_dim(), P = prefix.rows, W = ring_->capacity();
  const int64_t HD = int64_t(s.n_heads) * head_dim_;
  SINKQ_CHECK(recent_layer_ == layer && recent_row0_ + recent_rows_ == n,
              "codebook KV with --kv-recent: attention of layer {} over {} rows must follow the write of those rows",
              layer, n);
  SINKQ_CHECK(s.sliding_window == 0, "--kv-recent: sliding-window attention is not supported");
  rk_rot_.assign(rk_.begin(), rk_.end());  // the int8 rows as the prefix keys are: RoPE (+ R3)
  rope_r3(layer, rk_rot_.data(), recent_rows_, P + recent_row0_);
  auto recent_k = [&](int64_t row) { return rk_rot_.data() + (row - recent_row0_) * KV; };
  auto recent_v = [&](int64_t row) { return rv_.data() + (row - recent_row0_) * KV; };
  const bool fused = T < kFusedMaxT;
  if (!fused) {  // [prefix; every body row decoded], so that prefix + the old rows are one segment
    seg_k_.resize(size_t((P + n) * KV));
    seg_v_.resize(size_t((P + n) * KV));
    std::copy(prefix.k, prefix.k + P * KV, seg_k_.data());
    std::copy(prefix.v, prefix.v + P * KV, seg_v_.data());
    cache_.dequantize(layer, false, n, seg_k_.data() + P * KV);
    cache_.dequantize(layer, true, n, seg_v_.data() + P * KV);
    rope_r3(layer, seg_k_.data() + P * KV, n, P);
  } else {  // [prefix; recent rows]: the prefix once, the recent rows per query below
    seg_k_.resize(size_t((P + W) * KV));
    seg_v_.resize(size_t((P + W) * KV));
    std::copy(prefix.k, prefix.k + P * KV, seg_k_.data());
    std::copy(prefix.v, prefix.v + P * KV, seg_v_.data());
    if (pre_rope_ && r3_) {
      q_.assign(q, q + T * HD);
      quant::fwht_inplace(q_.data(), T * s.n_heads, head_dim_);
    }
  }
  for (int64_t i = 0; i < T; ++i) {
    const int64_t t = n_past + i, m = std::min<int64_t>(W, t + 1), old = t - m + 1;
    const float* qi = q + i * HD;
    float* oi = out + i * HD;
    if (!fused) {  // the old rows behind the prefix, the m recent rows as the cache
      sinkq::attention(s, qi, KvSegment{seg_k_.data(), seg_v_.data(), P + old}, recent_k(old), recent_v(old), m - 1, 1,
                       oi);
      continue;
    }
    if (old == 0) {  // every row recent
      sinkq::attention(s, qi, prefix, recent_k(0), recent_v(0), m - 1, 1, oi);
      continue;
    }
    // [prefix; the m recent rows] as the fp32 segment, the old rows through the fused kernels.
    std::copy(recent_k(old), recent_k(old) + m * KV, seg_k_.data() + P * KV);
    std::copy(recent_v(old), recent_v(old) + m * KV, seg_v_.data() + P * KV);
    const float* qb = pre_rope_ && r3_ ? q_.data() + i * HD : qi;
    lowbit::attention_codebook(s, qi, qb, KvSegment{seg_k_.data(), seg_v_.data(), P + m}, cache_, layer, old - 1, 1,
                               pre_rope_ ? cs(layer) + P * head_dim_ : nullptr, oi);
  }
}

void attach_codebook_kv(Forward& fwd, const CodebookKvScheme& scheme) {
  fwd.set_kv_store(std::make_unique<CodebookKvStore>(fwd.model(), fwd.body_capacity(), scheme));
}

}  // namespace sinkq::runtime
