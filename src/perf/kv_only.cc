// sinkq/perf/kv_only.cc — the --kv-only workload (kv_only.h).
#include "perf/kv_only.h"

#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <random>

#include "core/error.h"
#include "core/mmap.h"
#include "formats/nuq.h"
#include "kernels/ops.h"
#include "lowbit/codebook_kv.h"
#include "lowbit/kv_kernels.h"
#include "perf/bench.h"

namespace sinkq::perf {

namespace nuq = formats::nuq;

KvOnlyStorage parse_kv_storage(const std::string& name) {
  KvOnlyStorage s;
  s.name = name;
  using K = KvOnlyStorage::Kind;
  if (name == "fp32") return s.kind = K::Fp32, s.bits = 32, s;
  if (name == "fp16") return s.kind = K::Fp16, s.bits = 16, s;
  if (name == "int8" || name == "int4") return s.kind = K::Int, s.bits = name[3] - '0', s;
  std::string base = name;
  if (base.size() > 5 && base.ends_with("-1pct")) base.resize(base.size() - 5), s.outliers = 0.01;
  SINKQ_CHECK(base == "nuq4" || base == "nuq3" || base == "nuq2",
              "--kv: unknown KV storage '{}': expected fp32, fp16, int8, int4, nuq4, nuq3, nuq2 (nuqN-1pct: with 1% "
              "outliers)",
              name);
  s.kind = K::Codebook;
  s.bits = base[3] - '0';
  return s;
}

std::vector<KvOnlyStorage> parse_kv_storages(const std::string& list) {
  std::vector<KvOnlyStorage> v;
  size_t a = 0;
  while (a <= list.size()) {
    const size_t b = std::min(list.find(',', a), list.size());
    const std::string item = list.substr(a, b - a);
    SINKQ_CHECK(!item.empty(), "--kv: empty entry in '{}'", list);
    v.push_back(parse_kv_storage(item));
    a = b + 1;
  }
  return v;
}

namespace {

// Rows [n, kv_dim] of N(0, 1) with every 7th channel ×6 (large key channels).
std::vector<float> rows(int64_t n, int64_t kv_dim, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n * kv_dim));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < kv_dim; ++j) v[size_t(i * kv_dim + j)] = d(rng) * (j % 7 == 3 ? 6.0f : 1.0f);
  return v;
}

constexpr int64_t kBlock = 512;  // rows of synthetic data written again and again

// Per-channel key codec (ranges from the block's quantiles) and per-token value codec.
nuq::Codec codec(int bits, double p, bool channel, const std::vector<float>& block, int64_t kv_dim) {
  nuq::Codec c;
  c.per_channel = channel;
  c.outliers = p;
  c.levels = nuq::nf_levels(bits);
  if (channel)
    for (int64_t j = 0; j < kv_dim; ++j) {
      const nuq::Range r = nuq::outlier_range(block.data() + j, kBlock, kv_dim, p);
      c.lo.push_back(r.lo);
      c.hi.push_back(r.hi);
    }
  return c;
}

// Calls store(layer, row0, k, v, T) to fill ctx rows of every layer, the layers in parallel.
template <class Store>
double fill(int layers, int64_t ctx, const std::vector<float>& k, const std::vector<float>& v, Store&& store) {
  const auto t0 = Clock::now();
#pragma omp parallel for schedule(dynamic, 1) num_threads(num_threads())
  for (int l = 0; l < layers; ++l)
    for (int64_t r = 0; r < ctx; r += kBlock) {
      const int64_t T = std::min(kBlock, ctx - r);
      store(l, r, k.data(), v.data(), T);
    }
  return secs(t0, Clock::now());
}

template <class Attn>
double time_step(int layers, int reps, Attn&& attn) {
  std::vector<double> ms;
  for (int r = 0; r <= reps; ++r) {
    const auto t0 = Clock::now();
    for (int l = 0; l < layers; ++l) attn(l);
    if (r > 0) ms.push_back(1e3 * secs(t0, Clock::now()));  // rep 0 warms up
  }
  return median(ms);
}

}  // namespace

KvOnlyResult run_kv_only(const ModelConfig& c, const KvOnlyStorage& s, int64_t ctx, int reps) {
  SINKQ_CHECK(ctx >= 1, "--ctx must be >= 1 (got {})", ctx);
  SINKQ_CHECK(reps >= 1, "--reps must be >= 1 (got {})", reps);
  using K = KvOnlyStorage::Kind;
  const int L = c.num_layers, D = c.head_dim, H = c.num_heads, Hkv = c.num_kv_heads;
  const int64_t KV = c.kv_dim();
  const int group = H / Hkv;
  KvOnlyResult r;
  r.name = s.name;
  r.ctx = ctx;
  // Bytes per cached token, before allocating: the store's own accounting at capacity 1 and 2.
  auto per_token = [&](auto make) {
    const double b1 = double(make(1).bytes()), b2 = double(make(2).bytes());
    return std::pair{b2 - b1, b1 - (b2 - b1)};  // (per row, constant)
  };
  const std::vector<float> kb = rows(kBlock, KV, 1), vb = rows(kBlock, KV, 2);
  std::vector<nuq::Codec> ck, cv;
  double constant = 0;
  switch (s.kind) {
    case K::Fp32: r.bytes_per_token = double(L) * 2 * double(KV) * 4; r.describe = "fp32 cache"; break;
    case K::Fp16: r.bytes_per_token = double(L) * 2 * double(KV) * 2; r.describe = "fp16 (bytes only)"; break;
    case K::Int: {
      const lowbit::PackedFormat f = s.bits == 8 ? lowbit::PackedFormat::KV8_PerHead : lowbit::PackedFormat::KV4_PerHead;
      std::tie(r.bytes_per_token, constant) =
          per_token([&](int64_t cap) { return lowbit::PackedKvCache(f, L, Hkv, D, cap); });
      r.describe = std::string(lowbit::kv_traits(f).name) + " (dynamic per token and kv head)";
      break;
    }
    case K::Codebook: {
      for (int l = 0; l < L; ++l) {
        ck.push_back(codec(s.bits, s.outliers, true, kb, KV));
        cv.push_back(codec(s.bits, s.outliers, false, vb, KV));
      }
      std::tie(r.bytes_per_token, constant) =
          per_token([&](int64_t cap) { return lowbit::CodebookKvCache(L, KV, cap, ck, cv); });
      // The sparse part: round(p·n/2) per side per value token; the keys' channel ranges leave
      // about p of the values outside by construction — 4 bytes per entry.
      r.bytes_per_token += double(L) * 2 * s.outliers * double(KV) * 4;
      r.describe = fmt::format("nuq{} codebook, keys per channel pre-RoPE, values per token{}", s.bits,
                               s.outliers > 0 ? fmt::format(", {:g}% outliers fp16 CSR", 100 * s.outliers) : "");
      break;
    }
  }
  r.need_bytes = constant + r.bytes_per_token * double(ctx) +
                 double(num_threads()) * group * double(ctx) * 4 +                      // score rows
                 (s.kind == K::Codebook ? double(ctx) * D * 4 : 0.0) +                 // RoPE cos | sin
                 2.0 * kBlock * double(KV) * 4;
  r.available_bytes = double(mem_available_bytes());
  if (s.kind == K::Fp16) return r;
  if (r.need_bytes > 0.9 * r.available_bytes) {
    r.skipped = fmt::format("needs {:.2f} GB, MemAvailable {:.2f} GB", r.need_bytes / 1e9, r.available_bytes / 1e9);
    return r;
  }
  const AttnShape shape{H, Hkv, D, 0};
  std::mt19937_64 rng(3);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> q(size_t(H * D)), out(q.size());
  for (float& x : q) x = u(rng);
  int64_t bytes_read = 0;
  std::fprintf(stderr, "bench --kv-only: %s, ctx %lld: filling %d layers\n", s.name.c_str(), (long long)ctx, L);
  switch (s.kind) {
    case K::Fp32: {
      std::vector<std::vector<float>> k(static_cast<size_t>(L)), v(static_cast<size_t>(L));
      for (int l = 0; l < L; ++l) k[size_t(l)].resize(size_t(ctx * KV)), v[size_t(l)].resize(size_t(ctx * KV));
      r.fill_s = fill(L, ctx, kb, vb, [&](int l, int64_t r0, const float* kk, const float* vv, int64_t T) {
        std::copy(kk, kk + T * KV, k[size_t(l)].data() + r0 * KV);
        std::copy(vv, vv + T * KV, v[size_t(l)].data() + r0 * KV);
      });
      std::fprintf(stderr, "bench --kv-only: %s, ctx %lld: timing\n", s.name.c_str(), (long long)ctx);
      r.ms_per_token = time_step(L, reps, [&](int l) {
        attention(shape, q.data(), k[size_t(l)].data(), v[size_t(l)].data(), ctx - 1, 1, out.data());
      });
      bytes_read = int64_t(L) * 2 * ctx * KV * 4;
      break;
    }
    case K::Int: {
      const lowbit::PackedFormat f = s.bits == 8 ? lowbit::PackedFormat::KV8_PerHead : lowbit::PackedFormat::KV4_PerHead;
      lowbit::PackedKvCache cache(f, L, Hkv, D, ctx);
      r.fill_s = fill(L, ctx, kb, vb, [&](int l, int64_t r0, const float* kk, const float* vv, int64_t T) {
        cache.store(l, r0, kk, vv, T);
      });
      std::fprintf(stderr, "bench --kv-only: %s, ctx %lld: timing\n", s.name.c_str(), (long long)ctx);
      r.ms_per_token = time_step(L, reps, [&](int l) {
        lowbit::attention_packed(shape, q.data(), KvSegment{}, cache, l, ctx - 1, 1, out.data());
      });
      bytes_read = int64_t(cache.bytes());
      r.bytes_per_token = double(cache.bytes()) / double(ctx);
      break;
    }
    case K::Codebook: {
      lowbit::CodebookKvCache cache(L, KV, ctx, ck, cv);
      r.fill_s = fill(L, ctx, kb, vb, [&](int l, int64_t r0, const float* kk, const float* vv, int64_t T) {
        cache.store(l, r0, kk, vv, T);
      });
      const RopeTable rope = RopeTable::make(c.rope());
      std::vector<float> cs(size_t(ctx * D));
      for (int64_t p = 0; p < ctx; ++p) rope_cos_sin(rope, int32_t(p), cs.data() + p * D);
      std::fprintf(stderr, "bench --kv-only: %s, ctx %lld: timing\n", s.name.c_str(), (long long)ctx);
      r.ms_per_token = time_step(L, reps, [&](int l) {
        lowbit::attention_codebook(shape, q.data(), nullptr, KvSegment{}, cache, l, ctx - 1, 1, cs.data(), out.data());
      });
      for (int l = 0; l < L; ++l) r.outliers += cache.outliers(l, false) + cache.outliers(l, true);
      bytes_read = int64_t(cache.bytes());
      r.bytes_per_token = double(cache.bytes()) / double(ctx);
      break;
    }
    case K::Fp16: break;
  }
  r.timed = true;
  r.gbs = double(bytes_read) / (r.ms_per_token * 1e-3) / 1e9;
  return r;
}

}  // namespace sinkq::perf
