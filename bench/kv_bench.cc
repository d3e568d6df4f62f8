// bench/kv_bench.cc — decode attention over the KV cache (sinkq_kv_bench): fp32 cache
// (kernels/ops.h attention) vs the packed int8 / int4 body (lowbit/kv_kernels.h) vs the codebook
// body (lowbit/codebook_kv.h: keys per channel before RoPE, RoPE in the kernel), per ISA.
//
// 1B shape (TinyLlama-1.1B: 32 heads, 4 KV heads, head_dim 64), one decode token (T = 1) after
// ctx - 1 cached rows, over all 22 layers (distinct caches, as one decode step reads them: the
// fp32 cache of 2048 rows is 92 MB, beyond the L3, int8 24.5 MB, int4 13 MB). bytes/s counts the
// cache bytes one step reads (codes + scales; fp32: 4 bytes per element).
//   SINKQ_THREADS=1 ./sinkq_kv_bench --benchmark_repetitions=3 --benchmark_report_aggregates_only=true
// Args: isa (0 scalar, 1 avx2, 2 avx512), format (0 fp32, 8 kv8_per_head, 4 kv4_per_head, 104 nuq4,
// 103 nuq3 with 1% outliers), ctx. `sinkq bench --kv-only` runs the same step at long contexts.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "bench_util.h"
#include "kernels/cpu_features.h"
#include "kernels/ops.h"
#include "formats/nuq.h"
#include "lowbit/codebook_kv.h"
#include "lowbit/formats.h"
#include "lowbit/kv_kernels.h"

namespace sinkq {
namespace {

constexpr int kLayers = 22, kHeads = 32, kKvHeads = 4, kHeadDim = 64;
constexpr int64_t kKvDim = int64_t(kKvHeads) * kHeadDim;

struct Fp32Cache {
  std::vector<std::vector<float>> k, v;  // [layer][ctx, kv_dim]
};

const Fp32Cache& fp32_cache(int64_t ctx) {
  static std::map<int64_t, Fp32Cache> cache;
  Fp32Cache& c = cache[ctx];
  if (c.k.empty())
    for (int l = 0; l < kLayers; ++l) {
      c.k.push_back(bench::vec(size_t(ctx * kKvDim), uint64_t(2 * l + 1), 2.0f));
      c.v.push_back(bench::vec(size_t(ctx * kKvDim), uint64_t(2 * l + 2), 1.0f));
    }
  return c;
}

const lowbit::PackedKvCache& packed_cache(int bits, int64_t ctx) {
  static std::map<std::pair<int, int64_t>, std::unique_ptr<lowbit::PackedKvCache>> cache;
  auto& c = cache[{bits, ctx}];
  if (!c) {
    const Fp32Cache& f = fp32_cache(ctx);
    c = std::make_unique<lowbit::PackedKvCache>(
        bits == 8 ? lowbit::PackedFormat::KV8_PerHead : lowbit::PackedFormat::KV4_PerHead, kLayers, kKvHeads,
        kHeadDim, ctx);
    for (int l = 0; l < kLayers; ++l) c->store(l, 0, f.k[size_t(l)].data(), f.v[size_t(l)].data(), ctx);
  }
  return *c;
}

// Codebook body: NormalFloat levels (a learned codebook has the same layout and cost), per-channel
// key ranges from the data's quantiles, per-token values; `bits` 4 without outliers or 3 with 1%.
const lowbit::CodebookKvCache& codebook_cache(int bits, int64_t ctx) {
  static std::map<std::pair<int, int64_t>, std::unique_ptr<lowbit::CodebookKvCache>> cache;
  auto& c = cache[{bits, ctx}];
  if (!c) {
    const Fp32Cache& f = fp32_cache(ctx);
    const double p = bits == 3 ? 0.01 : 0.0;
    std::vector<formats::nuq::Codec> ck, cv;
    for (int l = 0; l < kLayers; ++l) {
      formats::nuq::Codec k, v;
      k.per_channel = true;
      k.outliers = v.outliers = p;
      k.levels = v.levels = formats::nuq::nf_levels(bits);
      for (int64_t j = 0; j < kKvDim; ++j) {
        const formats::nuq::Range r = formats::nuq::outlier_range(f.k[size_t(l)].data() + j, ctx, kKvDim, p);
        k.lo.push_back(r.lo);
        k.hi.push_back(r.hi);
      }
      ck.push_back(k);
      cv.push_back(v);
    }
    c = std::make_unique<lowbit::CodebookKvCache>(kLayers, kKvDim, ctx, ck, cv);
    for (int l = 0; l < kLayers; ++l) c->store(l, 0, f.k[size_t(l)].data(), f.v[size_t(l)].data(), ctx);
  }
  return *c;
}

// cos | sin rows of positions 0..ctx-1 (TinyLlama's theta 10000).
const std::vector<float>& rope_rows(int64_t ctx) {
  static std::map<int64_t, std::vector<float>> rows;
  std::vector<float>& cs = rows[ctx];
  if (cs.empty()) {
    RopeParams rp;
    rp.head_dim = kHeadDim;
    rp.theta = 10000.0f;
    const RopeTable rt = RopeTable::make(rp);
    cs.resize(size_t(ctx * kHeadDim));
    for (int64_t p = 0; p < ctx; ++p) rope_cos_sin(rt, int32_t(p), cs.data() + p * kHeadDim);
  }
  return cs;
}

void BM_DecodeAttention(benchmark::State& st) {
  if (!bench::use_isa(st, st.range(0))) return;
  const int fmt = int(st.range(1));
  const int64_t ctx = st.range(2);
  const AttnShape s{kHeads, kKvHeads, kHeadDim, 0};
  const std::vector<float> q = bench::vec(size_t(kHeads * kHeadDim), 7);
  std::vector<float> out(q.size());
  int64_t bytes = 0;
  if (fmt == 0) {
    const Fp32Cache& c = fp32_cache(ctx);
    for (auto _ : st)
      for (int l = 0; l < kLayers; ++l) {
        attention(s, q.data(), KvSegment{}, c.k[size_t(l)].data(), c.v[size_t(l)].data(), ctx - 1, 1, out.data());
        benchmark::DoNotOptimize(out.data());
      }
    bytes = int64_t(kLayers) * 2 * ctx * kKvDim * 4;
  } else if (fmt > 100) {
    const lowbit::CodebookKvCache& c = codebook_cache(fmt - 100, ctx);
    const std::vector<float>& cs = rope_rows(ctx);
    for (auto _ : st)
      for (int l = 0; l < kLayers; ++l) {
        lowbit::attention_codebook(s, q.data(), nullptr, KvSegment{}, c, l, ctx - 1, 1, cs.data(), out.data());
        benchmark::DoNotOptimize(out.data());
      }
    bytes = int64_t(c.bytes()) / c.capacity() * ctx;
  } else {
    const lowbit::PackedKvCache& c = packed_cache(fmt, ctx);
    for (auto _ : st)
      for (int l = 0; l < kLayers; ++l) {
        lowbit::attention_packed(s, q.data(), KvSegment{}, c, l, ctx - 1, 1, out.data());
        benchmark::DoNotOptimize(out.data());
      }
    bytes = int64_t(c.bytes()) / c.capacity() * ctx;
  }
  st.SetBytesProcessed(int64_t(st.iterations()) * bytes);
  st.SetLabel(std::string(isa_name(active_isa())) + (fmt == 0     ? " fp32"
                                                     : fmt == 8   ? " kv8_per_head"
                                                     : fmt == 4   ? " kv4_per_head"
                                                     : fmt == 104 ? " nuq4"
                                                                  : " nuq3-1pct"));
}

BENCHMARK(BM_DecodeAttention)
    ->ArgNames({"isa", "fmt", "ctx"})
    ->ArgsProduct({{0, 1, 2}, {0, 8, 4, 104, 103}, {512, 2048}})
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace sinkq
