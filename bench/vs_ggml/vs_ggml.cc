// bench/vs_ggml/vs_ggml.cc — sinkq's kernels against ggml's (llama.cpp's kernel library) on the same
// shapes in one Google Benchmark binary (issue 19 goal 1). Built and run by bench/vs_ggml.sh
// against the ggml that bench/vs_llamacpp.sh builds from the llama-cpp-python sdist; not part of
// the normal build (it needs that source tree).
//
// Each pair runs the same work on both engines, adjacent, so --benchmark_repetitions with
// --benchmark_enable_random_interleaving puts load changes on both:
//   kind 0  fp32 GEMM, T = 512     ggml F32 mul_mat (its llamafile sgemm)   sinkq matmul F32 (OpenBLAS)
//   kind 1  bf16 GEMV, T = 1       ggml BF16 mul_mat                         sinkq matmul BF16
//   kind 2  W8A8 GEMV, T = 1       ggml Q8_0 (x quantized to q8_0 inside)    sinkq W8 per row, x → A8 per token
//   kind 3  W4A8 GEMV, T = 1       ggml Q4_0, CPU repack buffer (as llama.cpp loads it)
//                                                                            sinkq W4 g32 (Q4_0's granularity) / per row
//   kind 4  W8A8 GEMM, T = 512     as kind 2
//   kind 5  W4A8 GEMM, T = 512     as kind 3
// Both engines quantize their activations inside the timed call (ggml's mul_mat does; sinkq's
// PackedLinear::apply does: lowbit::quantize_dynamic + lowbit::gemm). Weights: the same
// uniform values in (-0.05, 0.05), each engine's own quantizer. Threads: arg (both engines).
// Counters: FLOPS = 2·T·out·in per second; GEMV bytes/s = the weight bytes streamed.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "ggml-cpu.h"
#include "ggml.h"

#include "../bench_util.h"
#include "core/dtype.h"
#include "io/weights.h"
#include "kernels/cpu_features.h"
#include "kernels/ops.h"
#include "lowbit/formats.h"
#include "lowbit/kernels.h"

namespace sinkq {
namespace {

using bench::f32_weights;
using bench::mat;
using bench::vec;
using lowbit::PackedFormat;

enum Kind { F32Gemm, Bf16Gemv, W8Gemv, W4Gemv, W8Gemm, W4Gemm };
int64_t tokens(int kind) { return kind == Bf16Gemv || kind == W8Gemv || kind == W4Gemv ? 1 : 512; }

// ---- ggml ------------------------------------------------------------------------------------

// y[T, out] = x[T, in] · W[out, in]ᵀ as one ggml graph on the CPU backend; W in `type`, in the CPU
// repack buffer type when asked (llama.cpp's default for Q4_0 on x86), x and y in a CPU buffer.
struct GgmlMatmul {
  ggml_backend_t backend = nullptr;
  ggml_context *wctx = nullptr, *gctx = nullptr;
  ggml_backend_buffer_t wbuf = nullptr, gbuf = nullptr;
  ggml_cgraph* graph = nullptr;
  ggml_tensor *W = nullptr, *x = nullptr, *y = nullptr;
  std::string buffer_name;

  GgmlMatmul(ggml_type type, int64_t out, int64_t in, int64_t T, bool repack, int threads) {
    backend = ggml_backend_cpu_init();
    if (!backend) throw std::runtime_error("ggml_backend_cpu_init failed");
    ggml_backend_cpu_set_n_threads(backend, threads);
    ggml_init_params wp{ggml_tensor_overhead() * 2, nullptr, /*no_alloc=*/true};
    wctx = ggml_init(wp);
    W = ggml_new_tensor_2d(wctx, type, in, out);
    ggml_backend_buffer_type_t buft = ggml_backend_cpu_buffer_type();
    if (repack) {
      ggml_backend_dev_t dev = ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU);
      auto get = reinterpret_cast<ggml_backend_dev_get_extra_bufts_t>(
          ggml_backend_reg_get_proc_address(ggml_backend_dev_backend_reg(dev), "ggml_backend_dev_get_extra_bufts"));
      bool found = false;
      for (ggml_backend_buffer_type_t* b = get ? get(dev) : nullptr; b && *b; ++b)
        if (std::string(ggml_backend_buft_name(*b)).find("REPACK") != std::string::npos) buft = *b, found = true;
      if (!found) throw std::runtime_error("ggml: no CPU_REPACK buffer type");
    }
    wbuf = ggml_backend_alloc_ctx_tensors_from_buft(wctx, buft);
    buffer_name = ggml_backend_buft_name(buft);
    const std::vector<float>& w = f32_weights(out, in);
    std::vector<uint8_t> bytes(ggml_nbytes(W));
    ggml_quantize_chunk(type, w.data(), bytes.data(), 0, out, in, nullptr);
    ggml_backend_tensor_set(W, bytes.data(), 0, bytes.size());

    ggml_init_params gp{ggml_tensor_overhead() * 8 + ggml_graph_overhead(), nullptr, /*no_alloc=*/true};
    gctx = ggml_init(gp);
    x = ggml_new_tensor_2d(gctx, GGML_TYPE_F32, in, T);
    y = ggml_mul_mat(gctx, W, x);
    graph = ggml_new_graph(gctx);
    ggml_build_forward_expand(graph, y);
    gbuf = ggml_backend_alloc_ctx_tensors(gctx, backend);
    const std::vector<float> xv = vec(size_t(T * in), 3);
    ggml_backend_tensor_set(x, xv.data(), 0, xv.size() * sizeof(float));
  }
  ~GgmlMatmul() {
    ggml_backend_buffer_free(gbuf);
    ggml_free(gctx);
    ggml_backend_buffer_free(wbuf);
    ggml_free(wctx);
    ggml_backend_free(backend);
  }
  void run() {
    if (ggml_backend_graph_compute(backend, graph) != GGML_STATUS_SUCCESS) throw std::runtime_error("ggml compute");
  }
};

void BM_Ggml(benchmark::State& st) {
  const int kind = int(st.range(0));
  const int64_t out = st.range(1), in = st.range(2), T = tokens(kind);
  const int threads = int(st.range(3));
  const ggml_type type = kind == F32Gemm                       ? GGML_TYPE_F32
                         : kind == Bf16Gemv                    ? GGML_TYPE_BF16
                         : kind == W8Gemv || kind == W8Gemm    ? GGML_TYPE_Q8_0
                                                               : GGML_TYPE_Q4_0;
  const bool repack = type == GGML_TYPE_Q4_0;
  GgmlMatmul m(type, out, in, T, repack, threads);
  for (auto _ : st) m.run();
  st.counters["FLOPS"] = benchmark::Counter(2.0 * double(T * out * in), benchmark::Counter::kIsIterationInvariantRate);
  if (T == 1) st.SetBytesProcessed(int64_t(st.iterations()) * int64_t(ggml_nbytes(m.W)));
  st.SetLabel(std::string("ggml ") + ggml_type_name(type) + " " + m.buffer_name);
}

// ---- sinkq -----------------------------------------------------------------------------------

// Args: kind, out, in, threads, weight format (kinds 2-5: a PackedFormat value).
void BM_Sinkq(benchmark::State& st) {
  const int kind = int(st.range(0));
  const int64_t out = st.range(1), in = st.range(2), T = tokens(kind);
  const int saved = num_threads();
  set_num_threads(int(st.range(3)));
  const std::vector<float> x = vec(size_t(T * in), 3);
  std::vector<float> y(static_cast<size_t>(T * out));
  if (kind == F32Gemm || kind == Bf16Gemv) {
    const Mat& W = mat(kind == F32Gemm ? DType::F32 : DType::BF16, out, in);
    for (auto _ : st) {
      matmul(x.data(), T, W, nullptr, y.data());
      benchmark::DoNotOptimize(y.data());
    }
    if (T == 1) st.SetBytesProcessed(int64_t(st.iterations()) * out * in * int64_t(dtype_size(W.dtype)));
    st.SetLabel(std::string("sinkq ") + std::string(isa_name(active_isa())) + " " + std::string(dtype_name(W.dtype)));
  } else {
    const PackedFormat f = PackedFormat(st.range(4));
    const lowbit::KernelWeights W = lowbit::repack(lowbit::quantize(f, f32_weights(out, in).data(), out, in));
    lowbit::PackedTensor xq;
    for (auto _ : st) {
      lowbit::quantize_dynamic(PackedFormat::A8_PerToken, x.data(), T, in, 1.0f, xq);
      lowbit::gemm(xq, W, nullptr, y.data());
      benchmark::DoNotOptimize(y.data());
    }
    if (T == 1) st.SetBytesProcessed(int64_t(st.iterations()) * int64_t(W.bytes()));
    st.SetLabel(std::string("sinkq ") + std::string(lowbit::kernel_isa_name()) + " " +
                std::string(lowbit::traits(f).name) + "+a8");
  }
  st.counters["FLOPS"] = benchmark::Counter(2.0 * double(T * out * in), benchmark::Counter::kIsIterationInvariantRate);
  set_num_threads(saved);
}

// The shapes (Llama-3-8B's MLP up, TinyLlama-1.1B's), the pairs adjacent.
void pairs() {
  const std::pair<int64_t, int64_t> shapes[] = {{14336, 4096}, {5632, 2048}};
  // fp32 GEMM also at SmolLM2-135M's MLP shapes (K = 576 / 1536: its fp32 prefill against llama.cpp).
  std::vector<std::pair<int64_t, int64_t>> f32_shapes(std::begin(shapes), std::end(shapes));
  f32_shapes.insert(f32_shapes.end(), {{1536, 576}, {576, 1536}});
  for (int kind : {Bf16Gemv, W8Gemv, W4Gemv, W8Gemm, W4Gemm, F32Gemm})
    for (auto [o, i] : kind == F32Gemm ? f32_shapes : std::vector(std::begin(shapes), std::end(shapes)))
      for (int threads : {1, 2}) {
        benchmark::RegisterBenchmark("BM_Ggml", BM_Ggml)->Args({kind, o, i, threads})->UseRealTime()->Unit(benchmark::kMicrosecond);
        std::vector<int> fmts = {0};
        if (kind == W8Gemv || kind == W8Gemm) fmts = {int(PackedFormat::W8_PerRow)};
        if (kind == W4Gemv || kind == W4Gemm) fmts = {int(PackedFormat::W4_G32), int(PackedFormat::W4_PerRow)};
        for (int f : fmts)
          benchmark::RegisterBenchmark("BM_Sinkq", BM_Sinkq)
              ->Args({kind, o, i, threads, f})
              ->UseRealTime()
              ->Unit(benchmark::kMicrosecond);
      }
}

}  // namespace
}  // namespace sinkq

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  sinkq::pairs();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
