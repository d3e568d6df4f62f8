// bench/lowbit_bench.cc — Google Benchmark suite of the integer low-bit kernels (sinkq_lowbit_bench)
// against the fp32 / bf16 matmul of the kernels layer, in one binary.
//
// GEMV (decode, T = 1) at TinyLlama-1.1B shapes: W8A8 / W4A8 (lowbit::gemm on pre-quantized
// activations) vs matmul on F32 / BF16 weights. bytes/s counts the weight bytes the kernel
// streams (KernelWeights::bytes(): codes + scales (+ zeros); F32/BF16: out·in·size), as in
// kernels_bench.cc. 2048x2048 fits the L3 in every format; 32000x2048 is the DRAM figure.
// GEMM (prefill, T = 512): W8A8 / W4A8 vs matmul F32 (OpenBLAS sgemm), FLOPS = 2·T·out·in.
// One site's linears (q/k/v, gate/up) with the activations quantized once and one gemm_multi
// dispatch against one quantization and GEMM per matrix.
// Activation quantization fp32 -> int8 / int4: static per-tensor vs dynamic per-token (PrefixQuant
// Table 8 shapes, every ISA, 1 and 2 threads), bytes/s = fp32 input bytes.
//   ./sinkq_lowbit_bench --benchmark_repetitions=3 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "bench_util.h"
#include "core/dtype.h"
#include "formats/quantizer.h"
#include "io/weights.h"
#include "kernels/cpu_features.h"
#include "kernels/ops.h"
#include "lowbit/formats.h"
#include "lowbit/kernels.h"

namespace sinkq {
namespace {

using bench::f32_weights;
using bench::float_gemv;
using bench::mat;
using bench::Lcg;
using bench::use_isa;
using bench::vec;

using lowbit::PackedFormat;


// The same weights quantized (RTN, clip 1) and repacked.
const lowbit::KernelWeights& qweights(PackedFormat f, int64_t rows, int64_t cols) {
  static std::map<std::tuple<int, int64_t, int64_t>, lowbit::KernelWeights> cache;
  auto key = std::make_tuple(int(f), rows, cols);
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  return cache[key] = lowbit::repack(lowbit::quantize(f, f32_weights(rows, cols).data(), rows, cols));
}

lowbit::PackedTensor acts(int64_t T, int64_t cols, uint64_t seed) {
  const std::vector<float> x = vec(size_t(T * cols), seed);
  lowbit::PackedTensor q;
  lowbit::quantize_dynamic(PackedFormat::A8_PerToken, x.data(), T, cols, 1.0f, q);
  return q;
}

const std::pair<int64_t, int64_t> kGemvShapes[] = {{2048, 2048}, {5632, 2048}, {2048, 5632}, {32000, 2048}};
const std::pair<int64_t, int64_t> kGemmShapes[] = {{2048, 2048}, {5632, 2048}, {2048, 5632}};

// fp32 / bf16 matmul, T = 1. Args: isa, dtype, out, in.
void BM_GemvFloat(benchmark::State& st) {
  if (!use_isa(st, st.range(0))) return;
  float_gemv(st, mat(DType(st.range(1)), st.range(2), st.range(3)));
}
void gemv_float_args(benchmark::internal::Benchmark* b) {
  for (int isa : {1, 2})
    for (DType dt : {DType::F32, DType::BF16})
      for (auto [o, i] : kGemvShapes) b->Args({isa, int(dt), o, i});
  b->ArgNames({"isa", "dtype", "out", "in"})->Unit(benchmark::kMicrosecond)->UseRealTime();
}
BENCHMARK(BM_GemvFloat)->Apply(gemv_float_args);

// Integer GEMV, activations already quantized (A8 per token). Args: isa, weight format, out, in.
void BM_GemvLowbit(benchmark::State& st) {
  if (!use_isa(st, st.range(0))) return;
  const PackedFormat f = PackedFormat(st.range(1));
  const int64_t out = st.range(2), in = st.range(3);
  const lowbit::KernelWeights& W = qweights(f, out, in);
  const lowbit::PackedTensor x = acts(1, in, 1);
  std::vector<float> y(static_cast<size_t>(out));
  for (auto _ : st) {
    lowbit::gemm(x, W, nullptr, y.data());
    benchmark::DoNotOptimize(y.data());
  }
  st.SetBytesProcessed(int64_t(st.iterations()) * int64_t(W.bytes()));
  st.SetLabel(std::string(lowbit::kernel_isa_name()) + " " + std::string(lowbit::traits(f).name) + "+a8");
}
void gemv_lowbit_args(benchmark::internal::Benchmark* b) {
  for (int isa : {1, 2})
    for (PackedFormat f : {PackedFormat::W8_PerRow, PackedFormat::W4_PerRow, PackedFormat::W4_G128})
      for (auto [o, i] : kGemvShapes) b->Args({isa, int(f), o, i});
  b->ArgNames({"isa", "wfmt", "out", "in"})->Unit(benchmark::kMicrosecond)->UseRealTime();
}
BENCHMARK(BM_GemvLowbit)->Apply(gemv_lowbit_args);

// Prefill T = 512: fp32 matmul (OpenBLAS sgemm on the OpenMP threads). Args: out, in.
void BM_GemmF32(benchmark::State& st) {
  set_isa(detected_isa());
  const int64_t T = 512, out = st.range(0), in = st.range(1);
  const Mat& W = mat(DType::F32, out, in);
  const std::vector<float> x = vec(size_t(T * in), 3);
  std::vector<float> y(static_cast<size_t>(T * out));
  for (auto _ : st) matmul(x.data(), T, W, nullptr, y.data());
  st.counters["FLOPS"] = benchmark::Counter(2.0 * T * out * in, benchmark::Counter::kIsIterationInvariantRate);
}
void gemm_shapes(benchmark::internal::Benchmark* b) {
  for (auto [o, i] : kGemmShapes) b->Args({o, i});
  b->ArgNames({"out", "in"})->Unit(benchmark::kMillisecond)->UseRealTime();
}
BENCHMARK(BM_GemmF32)->Apply(gemm_shapes);

// Times the T = 512 integer GEMM of W on A8 per-token activations; label: ISA path, format, extra.
void time_gemm(benchmark::State& st, const lowbit::KernelWeights& W, const std::string& extra = "") {
  const int64_t T = 512, out = W.rows, in = W.cols;
  const lowbit::PackedTensor x = acts(T, in, 3);
  std::vector<float> y(static_cast<size_t>(T * out));
  for (auto _ : st) lowbit::gemm(x, W, nullptr, y.data());
  st.counters["FLOPS"] = benchmark::Counter(2.0 * T * out * in, benchmark::Counter::kIsIterationInvariantRate);
  st.SetLabel(std::string(lowbit::kernel_isa_name()) + " " + std::string(lowbit::traits(W.format).name) + "+a8" + extra);
}

// Prefill T = 512, integer GEMM on A8 per-token activations. Args: isa, weight format, out, in.
void BM_GemmLowbit(benchmark::State& st) {
  if (!use_isa(st, st.range(0))) return;
  time_gemm(st, qweights(PackedFormat(st.range(1)), st.range(2), st.range(3)));
}
void gemm_lowbit_args(benchmark::internal::Benchmark* b) {
  for (int isa : {1, 2})
    for (PackedFormat f : {PackedFormat::W8_PerRow, PackedFormat::W4_PerRow, PackedFormat::W4_G128})
      for (auto [o, i] : kGemmShapes) b->Args({isa, int(f), o, i});
  b->ArgNames({"isa", "wfmt", "out", "in"})->Unit(benchmark::kMillisecond)->UseRealTime();
}
BENCHMARK(BM_GemmLowbit)->Apply(gemm_lowbit_args);

// The W8A8 GEMM on clipped weights, so that some codes are -128 (as a grid-searched clip leaves
// them: 0.05% of SmolLM2's W8 codes), which AVX2's signed kernel corrects one by one (kernels.h)
// up to a share per block, beyond which the block takes the offset kernel; the label gives the
// share (the weights are uniform: ~(1 - clip) / 2). Args: isa, clip in 1/1000, out, in.
void BM_GemmW8Clipped(benchmark::State& st) {
  if (!use_isa(st, st.range(0))) return;
  const int64_t clip = st.range(1), out = st.range(2), in = st.range(3);
  static std::map<std::tuple<int64_t, int64_t, int64_t>, lowbit::KernelWeights> cache;
  lowbit::KernelWeights& W = cache[{clip, out, in}];
  if (W.codes.empty())
    W = lowbit::repack(
        lowbit::quantize(PackedFormat::W8_PerRow, f32_weights(out, in).data(), out, in, float(clip) / 1000.0f));
  char share[64];
  std::snprintf(share, sizeof share, ", %.3f%% codes -128", 100.0 * double(W.neg128.size()) / double(out * in));
  time_gemm(st, W, share);
}
void gemm_clipped_args(benchmark::internal::Benchmark* b) {
  for (int isa : {1, 2})
    for (int clip : {999, 995, 990, 984, 970, 900}) b->Args({isa, clip, 2048, 2048});
  b->ArgNames({"isa", "clip", "out", "in"})->Unit(benchmark::kMillisecond)->UseRealTime();
}
BENCHMARK(BM_GemmW8Clipped)->Apply(gemm_clipped_args);

// One site's linears (TinyLlama-1.1B: q/k/v 2048 + 256 + 256 rows over 2048 columns; gate/up
// 5632 + 5632 rows over 2048) from fp32 activations: per-token A8 quantization then the integer
// GEMMs, either one quantization + one GEMM per matrix (shared 0, the forward before site sharing)
// or one quantization + one lowbit::gemm_multi dispatch (shared 1, LinearImpl::apply_shared's
// path). bytes/s = the site's weight bytes. Args: isa, weight format, site (0 q/k/v, 1 gate/up),
// T, threads, shared.
void BM_SiteLowbit(benchmark::State& st) {
  if (!use_isa(st, st.range(0))) return;
  const PackedFormat f = PackedFormat(st.range(1));
  const bool qkv = st.range(2) == 0;
  const int64_t T = st.range(3), in = 2048;
  const int threads = int(st.range(4));
  const bool shared = st.range(5) != 0;
  const std::vector<int64_t> rows = qkv ? std::vector<int64_t>{2048, 256, 256} : std::vector<int64_t>{5632, 5632};
  std::vector<const lowbit::KernelWeights*> W;
  std::vector<std::vector<float>> y;
  int64_t bytes = 0;
  for (size_t m = 0; m < rows.size(); ++m) {
    W.push_back(&qweights(f, rows[m], in));  // k and v (gate and up) are one cached matrix: the same bytes either way
    y.emplace_back(size_t(T * rows[m]));
    bytes += int64_t(W.back()->bytes());
  }
  const std::vector<float> x = vec(size_t(T * in), 5);
  const int saved = num_threads();
  set_num_threads(threads);
  lowbit::PackedTensor q;
  std::vector<lowbit::GemmOut> outs;
  for (size_t m = 0; m < W.size(); ++m) outs.push_back({W[m], nullptr, y[m].data()});
  for (auto _ : st) {
    if (shared) {
      lowbit::quantize_dynamic(PackedFormat::A8_PerToken, x.data(), T, in, 1.0f, q);
      lowbit::gemm_multi(q, outs);
    } else {
      for (size_t m = 0; m < W.size(); ++m) {
        lowbit::quantize_dynamic(PackedFormat::A8_PerToken, x.data(), T, in, 1.0f, q);
        lowbit::gemm(q, *W[m], nullptr, y[m].data());
      }
    }
    benchmark::DoNotOptimize(y[0].data());
  }
  set_num_threads(saved);
  st.SetBytesProcessed(int64_t(st.iterations()) * bytes);
  st.SetLabel(std::string(lowbit::kernel_isa_name()) + " " + std::string(lowbit::traits(f).name) + "+a8 " +
              (qkv ? "q/k/v" : "gate/up") + (shared ? " shared" : " separate"));
}
void site_lowbit_args(benchmark::internal::Benchmark* b) {
  for (int isa : {1, 2})
    for (PackedFormat f : {PackedFormat::W8_PerRow, PackedFormat::W4_G128})
      for (int site : {0, 1})
        for (int64_t T : {1, 512})
          for (int threads : {1, 2})
            for (int shared : {0, 1}) b->Args({isa, int(f), site, T, threads, shared});
  b->ArgNames({"isa", "wfmt", "site", "T", "threads", "shared"})->Unit(benchmark::kMicrosecond)->UseRealTime();
}
BENCHMARK(BM_SiteLowbit)->Apply(site_lowbit_args);

// PrefixQuant Table 8: fp32 -> int8 / int4 activation codes, static per-tensor (a calibrated scale,
// one quantize pass) vs dynamic per-token (an abs-max pass per token, then the quantize pass), at
// (tokens, features) = (1, 4096), (1, 8192), (2048, 4096), (2048, 8192). The input is generated
// once per shape; the 2048-token inputs (32 / 64 MiB) do not fit the 32 MiB L3, so those figures
// stream from DRAM. bytes/s = fp32 input bytes. Args: isa, bits, dynamic (0/1), threads, T, K.
void BM_ActQuant(benchmark::State& st) {
  if (!use_isa(st, st.range(0))) return;
  const int bits = int(st.range(1));
  const bool dynamic = st.range(2) != 0;
  const int threads = int(st.range(3));
  const int64_t T = st.range(4), K = st.range(5);
  static std::map<std::pair<int64_t, int64_t>, std::vector<float>> inputs;
  std::vector<float>& x = inputs[{T, K}];
  if (x.empty()) x = vec(size_t(T * K), uint64_t(T * 7 + K));
  const PackedFormat fs = bits == 8 ? PackedFormat::A8_PerTensor : PackedFormat::A4_PerTensor;
  const PackedFormat fd = bits == 8 ? PackedFormat::A8_PerToken : PackedFormat::A4_PerToken;
  // The static scale: calibrated on the input itself (so no value clamps; speed does not depend
  // on it: the kernels have no data-dependent branches besides the rare rounding-boundary lane).
  const quant::Params p = quant::compute_params(lowbit::quant_spec(fs), x.data(), T, K);
  const int saved = num_threads();
  set_num_threads(threads);
  lowbit::PackedTensor q;
  for (auto _ : st) {
    if (dynamic) lowbit::quantize_dynamic(fd, x.data(), T, K, 1.0f, q);
    else lowbit::quantize_static(fs, x.data(), T, K, p, q);
    benchmark::DoNotOptimize(q.codes.data());
    benchmark::ClobberMemory();
  }
  set_num_threads(saved);
  st.SetBytesProcessed(int64_t(st.iterations()) * T * K * 4);
  st.SetLabel(std::string(lowbit::kernel_isa_name()) + (dynamic ? " dynamic per-token a" : " static per-tensor a") +
              std::to_string(bits));
}
void act_quant_args(benchmark::internal::Benchmark* b) {
  const std::pair<int64_t, int64_t> shapes[] = {{1, 4096}, {1, 8192}, {2048, 4096}, {2048, 8192}};
  for (int isa : {0, 1, 2})
    for (int bits : {8, 4})
      for (int threads : {1, 2})
        for (auto [T, K] : shapes)
          for (int dyn : {0, 1}) b->Args({isa, bits, dyn, threads, T, K});
  b->ArgNames({"isa", "bits", "dynamic", "threads", "T", "K"})->Unit(benchmark::kMicrosecond)->UseRealTime();
}
BENCHMARK(BM_ActQuant)->Apply(act_quant_args);

}  // namespace
}  // namespace sinkq
