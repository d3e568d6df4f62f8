// sinkq/perf/kv_only.h — `sinkq bench --kv-only`: one decode step's attention over a synthetic KV
// cache of N tokens of a model shape, per KV storage, with no weights loaded — so the cache can
// be as long as memory allows (KVQuant's long-context claim, measured).
//
// Storages:
//   fp32              the engine's fp32 cache (kernels/ops.h attention)
//   int8 / int4       the packed per-(token, kv head) body (lowbit/kv_kernels.h), dynamic scales
//   nuq{4|3|2}[-1pct] the codebook body (lowbit/codebook_kv.h): keys per channel before RoPE
//                     (RoPE applied in the kernel from cached cos | sin rows), values per token,
//                     NormalFloat levels (a learned codebook has the same layout and cost), with
//                     -1pct 1% dense-and-sparse outliers per vector
//   fp16              bytes only (llama.cpp's default KV type; sinkq has no fp16 store): a row of
//                     the memory table, never timed
// The cache is filled through each store's own store() with normal rows (a few large channels,
// as keys have), so outlier counts and bytes are what that data produces; the fill runs the
// layers in parallel and is reported, not timed as attention. Before anything is allocated the
// bytes it needs (cache, RoPE rows, score scratch) are checked against MemAvailable: a storage
// that does not fit is reported with the figure it would need and skipped.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "io/config.h"

namespace sinkq::perf {

struct KvOnlyStorage {
  enum class Kind { Fp32, Fp16, Int, Codebook } kind = Kind::Fp32;
  std::string name;
  int bits = 32;
  double outliers = 0;
};
// fp32 | fp16 | int8 | int4 | nuq4 | nuq3 | nuq2, the nuq ones optionally with -1pct; an error
// naming --kv for anything else.
KvOnlyStorage parse_kv_storage(const std::string& name);
std::vector<KvOnlyStorage> parse_kv_storages(const std::string& list);

struct KvOnlyResult {
  std::string name, describe;
  int64_t ctx = 0;
  bool timed = false;            // false: fp16 (bytes only) or it did not fit
  std::string skipped;           // why it was not run (empty when it ran or is bytes-only)
  double bytes_per_token = 0;    // held per cached token, every layer, K and V
  double need_bytes = 0;         // what the run allocates (cache + RoPE rows + score scratch)
  double available_bytes = 0;    // MemAvailable before the run
  double fill_s = 0;             // writing ctx rows into every layer (parallel over layers)
  double ms_per_token = 0;       // median over reps of one decode step's attention, all layers
  double gbs = 0;                // cache bytes one step reads / its time
  int64_t outliers = 0;          // sparse entries held (codebook with -1pct)
};

// Runs (or sizes) one storage at context ctx for config c: T = 1 query at position ctx − 1 over
// ctx − 1 cached rows plus its own, every layer, `reps` timed repetitions after one warm-up.
KvOnlyResult run_kv_only(const ModelConfig& c, const KvOnlyStorage& s, int64_t ctx, int reps);

}  // namespace sinkq::perf
