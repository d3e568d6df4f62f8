// sinkq/perf/bench.h — what `sinkq bench` measures, as a library: synthetic workloads timed
// on a Forward (prefill and decode medians), weight and KV bytes per decode step, peak memory,
// the benchmark model shapes. The per-op profile is in perf/profile.h.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "io/config.h"
#include "io/weights.h"
#include "model/model.h"

namespace sinkq::perf {

using Clock = std::chrono::steady_clock;
inline double secs(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

// Median of v (mean of the middle two for an even count; 0 for none).
double median(std::vector<double> v);

// The config of a named random-weight benchmark shape: 1b (TinyLlama-1.1B) or tiny (for tests).
// Error naming --random for anything else.
ModelConfig random_config(const std::string& name);

// VmHWM / VmRSS ("VmHWM:", "VmRSS:") of /proc/self/status in bytes (0 where unreadable).
int64_t proc_status_bytes(const char* key);
// Resets the peak RSS (VmHWM) to the current RSS (Linux: "5" to clear_refs); false if refused.
bool reset_peak_rss();

// Bytes of a matrix in its dtype (0 for an empty one).
int64_t mat_bytes(const Mat& m);
// KV bytes a decode step reads per cached token (every layer, K and V): the packed store's, or fp32.
double kv_row_bytes_of(const Forward& f);
// Weight bytes of a decode step (linears + lm_head) and of the whole model (+ embeddings, norms).
void weight_bytes(const Model& m, int64_t& decode, int64_t& total);

// Synthetic token ids: the prompt of every prefill and the decode steps after it.
struct Workload {
  std::vector<int32_t> prompt;  // prefill tokens
  int64_t decode = 0;
  int reps = 1;
};
Workload make_workload(int64_t V, int64_t np, int64_t nd, int reps);
// The id fed at decode step i (vocabulary V).
inline int32_t decode_token(int64_t i, int64_t V) { return int32_t((i * 31 + 7) % V); }

struct Timing {
  double prefill_tps = 0, decode_tps = 0, decode_ms = 0;
};
// reps x (prefill, then `decode` steps); medians over reps of prefill throughput and over all
// decode steps of the per-token time.
Timing run(Forward& fwd, const Workload& w);

}  // namespace sinkq::perf
