// bench/cuda/cuda_linear_bench.cc — the device linear's decode GEMV (cuda/linear.h) against the
// device's own read bandwidth, side by side in one run (scripts/device_check.sh runs it on a GPU);
// its tensor-core prefill GEMM in TOPS; attention over packed and codebook KV bodies.
//
// Probe: a device-to-device cudaMemcpy of 2 GiB, bytes read + written over the median time. Each
// GEMV row: one token through a packed [N, K] matrix, the weight bytes it must read (codes,
// scales, zeros) over the median time per launch of 30 timings of 20 back-to-back launches (CUDA
// events), for each GEMV variant (unroll 1 and 4); the launches rotate
// over enough copies of the matrix to exceed 4x the L2 cache, so each one reads from HBM. Prints a
// table with the device, driver and clocks; --json FILE also writes the figures there as one JSON
// document. Then decode attention (cuda/attention.h) over one layer's int8 / int4 KV body at the
// 1B (32 / 4 heads of 64) and 7B (32 / 32 of 128) shapes, 4K to 256K tokens, the same way; and
// over a codebook (nuqX, KVQuant) body up to a million tokens of the 7B shape.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "cuda/attention.h"
#include "cuda/check.h"
#include "cuda/dense.h"
#include "cuda/linear.h"
#include "cuda/linear_kernels.h"
#include "lowbit/formats.h"
#include "lowbit/kernels.h"
#include "lowbit/kv_kernels.h"

namespace {

using namespace sinkq;
using lowbit::PackedFormat;

constexpr auto ck = cuda::detail::check;

// Median over `reps` of the time of `inner` back-to-back launches, per launch (launch i of the
// whole run gets index i, so callers rotate their inputs).
template <class F>
double median_ms(int reps, int inner, F&& launch) {
  cudaEvent_t a, b;
  ck(cudaEventCreate(&a), "cudaEventCreate");
  ck(cudaEventCreate(&b), "cudaEventCreate");
  int n = 0;
  for (int i = 0; i < 5; ++i) launch(n++);  // warm-up
  std::vector<double> ms;
  for (int i = 0; i < reps; ++i) {
    ck(cudaEventRecord(a), "cudaEventRecord");
    for (int j = 0; j < inner; ++j) launch(n++);
    ck(cudaEventRecord(b), "cudaEventRecord");
    ck(cudaEventSynchronize(b), "cudaEventSynchronize");
    float t = 0;
    ck(cudaEventElapsedTime(&t, a, b), "cudaEventElapsedTime");
    ms.push_back(double(t) / inner);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

// A synthetic codebook (nuqX) body of `rows` rows, laid out as lowbit::CodebookKvCache holds it:
// random b-bit indices, 2^b sorted levels, per-channel ranges (keys) or per-row ranges (values),
// and `outliers` of each row's channels as fp16 entries of the CSR (distinct, ascending). Filling
// a million rows through CodebookKvCache::store would take minutes; the kernels read the same
// layout either way.
struct SynthCb {
  std::vector<uint8_t> codes;
  std::vector<float> levels, ch_scale, ch_zero, row_sz;
  std::vector<uint32_t> row_ptr;
  std::vector<uint16_t> col, val;
  int64_t ld = 0;
  int bits = 3;
  cuda::DeviceCbLayer::Part part() const {
    cuda::DeviceCbLayer::Part p;
    p.codes = codes.data(), p.ld = ld, p.bits = bits, p.levels = levels.data();
    p.ch_scale = ch_scale.empty() ? nullptr : ch_scale.data();
    p.ch_zero = ch_zero.empty() ? nullptr : ch_zero.data();
    p.row_sz = row_sz.empty() ? nullptr : row_sz.data();
    p.row_ptr = row_ptr.data(), p.col = col.data(), p.val = val.data();
    return p;
  }
};

SynthCb synth_cb(int64_t rows, int64_t kv_dim, int bits, bool channel, double outliers, uint64_t seed) {
  SynthCb b;
  b.bits = bits, b.ld = kv_dim * bits / 8;
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  const auto next = [&x] { x ^= x << 13, x ^= x >> 7, x ^= x << 17; return x; };
  b.codes.resize(size_t(rows * b.ld + lowbit::detail::kCodeSlack));
  for (size_t i = 0; i + 8 <= b.codes.size(); i += 8) {
    const uint64_t r = next();
    std::memcpy(b.codes.data() + i, &r, 8);
  }
  const int L = 1 << bits;
  for (int i = 0; i < 16; ++i) b.levels.push_back(i < L ? -1.0f + 2.0f * float(i) / float(L - 1) : 0.0f);
  if (channel) {
    b.ch_scale.assign(size_t(kv_dim + 16), 0.5f);
    b.ch_zero.assign(size_t(kv_dim + 16), 0.0f);
  } else {
    b.row_sz.resize(size_t(2 * rows));
    for (int64_t j = 0; j < rows; ++j) b.row_sz[size_t(2 * j)] = 0.5f, b.row_sz[size_t(2 * j + 1)] = 0.0f;
  }
  const int64_t per_row = int64_t(double(kv_dim) * outliers + 0.5), stride = per_row > 0 ? kv_dim / per_row : 0;
  b.row_ptr.reserve(size_t(rows + 1));
  b.row_ptr.push_back(0);
  for (int64_t j = 0; j < rows; ++j) {
    for (int64_t e = 0; e < per_row; ++e) {  // one channel in each of per_row equal spans
      b.col.push_back(uint16_t(e * stride + int64_t(next() % uint64_t(stride))));
      b.val.push_back(f32_to_f16((next() & 1) ? 3.0f : -3.0f));
    }
    b.row_ptr.push_back(uint32_t(b.col.size()));
  }
  return b;
}

}  // namespace

int main(int argc, char** argv) {
  const char* json_path = argc > 2 && std::strcmp(argv[1], "--json") == 0 ? argv[2] : nullptr;
  if (argc > 1 && !json_path) {
    std::fprintf(stderr, "usage: sinkq_cuda_bench [--json FILE]\n");
    return 2;
  }
  try {
    std::string why;
    if (!cuda::device_available(&why)) fail("no CUDA device: {}", why);
    int dev = 0, driver = 0, runtime = 0;
    ck(cudaGetDevice(&dev), "cudaGetDevice");
    ck(cudaDriverGetVersion(&driver), "cudaDriverGetVersion");
    ck(cudaRuntimeGetVersion(&runtime), "cudaRuntimeGetVersion");
    cudaDeviceProp p{};
    ck(cudaGetDeviceProperties(&p, dev), "cudaGetDeviceProperties");
    int sm_clock = 0, mem_clock = 0;
    cudaDeviceGetAttribute(&sm_clock, cudaDevAttrClockRate, dev);
    cudaDeviceGetAttribute(&mem_clock, cudaDevAttrMemoryClockRate, dev);

    // The probe: device-to-device copy, read + write.
    const size_t probe_bytes = size_t(2) << 30;
    cuda::DeviceBuffer src(probe_bytes), dst(probe_bytes);
    src.fill_zero();
    const double copy_ms = median_ms(20, 1, [&](int) {
      ck(cudaMemcpyAsync(dst.get(), src.get(), probe_bytes, cudaMemcpyDeviceToDevice), "cudaMemcpyAsync");
    });
    const double probe_gbs = 2.0 * double(probe_bytes) / (copy_ms * 1e-3) / 1e9;

    struct Shape {
      const char* model;
      int64_t n, k;
    };
    const Shape shapes[] = {{"1.5B q/o", 1536, 1536}, {"1.5B gate/up", 8960, 1536}, {"1.5B down", 1536, 8960},
                            {"1B gate/up", 5632, 2048}, {"1B down", 2048, 5632},     {"7B q", 4096, 4096},
                            {"7B gate/up", 11008, 4096}, {"7B down", 4096, 11008}, {"1.5B head", 151936, 1536}};
    const PackedFormat formats[] = {PackedFormat::W8_PerRow, PackedFormat::W4_PerRow, PackedFormat::W4_G128_Asym,
                                    PackedFormat::W4_G32_Asym};
    std::mt19937_64 rng(7);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::string rows_json;
    std::printf("device: %s; driver %d, runtime %d; SM clock %d MHz, memory clock %d MHz\n"
                "probe: device-to-device copy %.0f GB/s (read + write, 2 GiB, median of 20)\n\n"
                "%-14s %6s %6s %-17s %10s %9s %8s %7s\n",
                cuda::device_description().c_str(), driver, runtime, sm_clock / 1000, mem_clock / 1000, probe_gbs,
                "shape", "N", "K", "format", "MB", "us", "GB/s", "% probe");
    for (const Shape& s : shapes) {
      std::vector<float> w(size_t(s.n * s.k));
      for (float& v : w) v = nd(rng);
      std::vector<float> x(size_t(s.k));
      for (float& v : x) v = nd(rng);
      cuda::DeviceBuffer xd(x.size() * sizeof(float)), yd(size_t(s.n) * sizeof(float));
      xd.upload(x.data(), xd.bytes());
      cuda::DeviceActivations act;
      cuda::quantize(xd.as<float>(), 1, s.k, cuda::ActQuant{}, act);
      for (const PackedFormat f : formats) {
        const lowbit::KernelWeights kw = lowbit::repack(lowbit::quantize(f, w.data(), s.n, s.k));
        std::vector<cuda::DeviceLinear> copies;
        copies.emplace_back(kw);
        const size_t bytes = copies[0].bytes();
        const size_t want = std::max<size_t>(2, (size_t(4) * size_t(p.l2CacheSize) + bytes - 1) / bytes);
        while (copies.size() < want) copies.emplace_back(kw);
        for (const int unroll : cuda::detail::kGemvUnrolls) {
          const double ms = median_ms(30, 20, [&](int i) {
            copies[size_t(i) % copies.size()].gemv(act, nullptr, yd.as<float>(), unroll);
          });
          ck(cudaGetLastError(), "gemv");
          const double gbs = double(bytes) / (ms * 1e-3) / 1e9;
          const std::string fname = std::string(lowbit::traits(f).name) + " u" + std::to_string(unroll);
          char buf[512];
          std::snprintf(buf, sizeof buf,
                        "%s{\"shape\": \"%s\", \"n\": %lld, \"k\": %lld, \"format\": \"%s\", \"unroll\": %d, "
                        "\"bytes\": %zu, \"us\": %.2f, \"gb_s\": %.1f, \"pct_probe\": %.1f}",
                        rows_json.empty() ? "" : ", ", s.model, (long long)s.n, (long long)s.k,
                        std::string(lowbit::traits(f).name).c_str(), unroll, bytes, ms * 1e3, gbs, 100.0 * gbs / probe_gbs);
          rows_json += buf;
          std::printf("%-14s %6lld %6lld %-17s %10.2f %9.2f %8.0f %6.0f%%\n", s.model, (long long)s.n, (long long)s.k,
                      fname.c_str(), double(bytes) / 1e6, ms * 1e3, gbs, 100.0 * gbs / probe_gbs);
        }
      }
      // The full-precision GEMV on the same engine (cuda/dense.h), f16 and bf16: torch_gemv.py's
      // rows are the same shapes in PyTorch.
      for (const DType dt : {DType::F16, DType::BF16}) {
        std::vector<uint16_t> h(w.size());
        for (size_t i = 0; i < w.size(); ++i) h[i] = dt == DType::F16 ? f32_to_f16(w[i]) : f32_to_bf16(w[i]);
        Mat m;
        m.dtype = dt, m.rows = s.n, m.cols = s.k, m.data = h.data();
        std::vector<cuda::DeviceMat> copies;
        copies.emplace_back(m);
        const size_t bytes = copies[0].bytes();
        const size_t want = std::max<size_t>(2, (size_t(4) * size_t(p.l2CacheSize) + bytes - 1) / bytes);
        while (copies.size() < want) copies.emplace_back(m);
        const double ms = median_ms(30, 20, [&](int i) { copies[size_t(i) % copies.size()].matmul(xd.as<float>(), 1, nullptr, yd.as<float>()); });
        ck(cudaGetLastError(), "dense gemv");
        const double gbs = double(bytes) / (ms * 1e-3) / 1e9;
        const std::string fname = std::string(dtype_name(dt)) + " dense";
        char buf[512];
        std::snprintf(buf, sizeof buf,
                      "%s{\"shape\": \"%s\", \"n\": %lld, \"k\": %lld, \"format\": \"%s\", \"unroll\": 0, "
                      "\"bytes\": %zu, \"us\": %.3f, \"gb_s\": %.1f, \"pct_probe\": %.1f}",
                      rows_json.empty() ? "" : ", ", s.model, (long long)s.n, (long long)s.k, fname.c_str(), bytes,
                      ms * 1e3, gbs, 100.0 * gbs / probe_gbs);
        rows_json += buf;
        std::printf("%-14s %6lld %6lld %-17s %10.2f %9.2f %8.0f %6.0f%%\n", s.model, (long long)s.n, (long long)s.k,
                    fname.c_str(), double(bytes) / 1e6, ms * 1e3, gbs, 100.0 * gbs / probe_gbs);
      }
    }
    // Prefill on the int8 tensor cores (DeviceLinear::gemm): 512 tokens through the 7B / 1.5B
    // matrices, TOPS = 2·T·N·K / time (the integer products and sums), beside the GEMV's
    // T = 512 rows. The goal: W8A8 ≥ 1.5× cuBLAS fp16 (torch_gemv.py prints torch.matmul
    // at the same shapes).
    std::printf("\n%-14s %6s %6s %5s %-17s %9s %8s\n", "prefill", "N", "K", "T", "format", "us", "TOPS");
    std::string gemm_json;
    for (const Shape& s : {shapes[5], shapes[6], shapes[1]}) {
      const int64_t T = 512;
      std::vector<float> w(size_t(s.n * s.k)), x(size_t(T * s.k));
      for (float& v : w) v = nd(rng);
      for (float& v : x) v = nd(rng);
      cuda::DeviceBuffer xd(x.size() * sizeof(float)), yd(size_t(T * s.n) * sizeof(float));
      xd.upload(x.data(), xd.bytes());
      cuda::DeviceActivations act;
      cuda::quantize(xd.as<float>(), T, s.k, cuda::ActQuant{}, act);
      for (const PackedFormat f : {PackedFormat::W8_PerRow, PackedFormat::W4_G128_Asym}) {
        const cuda::DeviceLinear dl(lowbit::repack(lowbit::quantize(f, w.data(), s.n, s.k)));
        for (const bool tc : {true, false}) {
          const double ms = median_ms(10, 3, [&](int) {
            if (tc) dl.gemm(act, nullptr, yd.as<float>());
            else dl.gemv(act, nullptr, yd.as<float>());
          });
          ck(cudaGetLastError(), "prefill");
          const double tops = 2.0 * double(T) * double(s.n) * double(s.k) / (ms * 1e-3) / 1e12;
          const std::string fname = std::string(lowbit::traits(f).name) + (tc ? " tc" : " gemv");
          std::printf("%-14s %6lld %6lld %5lld %-17s %9.1f %8.1f\n", s.model, (long long)s.n, (long long)s.k,
                      (long long)T, fname.c_str(), ms * 1e3, tops);
          char buf[256];
          std::snprintf(buf, sizeof buf, "%s{\"shape\": \"%s\", \"n\": %lld, \"k\": %lld, \"t\": %lld, \"format\": \"%s\", \"us\": %.2f, \"tops\": %.2f}",
                        gemm_json.empty() ? "" : ", ", s.model, (long long)s.n, (long long)s.k, (long long)T,
                        fname.c_str(), ms * 1e3, tops);
          gemm_json += buf;
        }
      }
    }
    // Decode attention (T = 1) over one layer's packed KV body: the body bytes the visible rows
    // hold (K and V codes and scales) over the median time per call.
    struct AttnShapeRow {
      const char* model;
      int heads, kv_heads, dim;
    };
    const AttnShapeRow ashapes[] = {{"1B", 32, 4, 64}, {"7B", 32, 32, 128}};
    std::printf("\n%-5s %6s %8s %-14s %10s %9s %8s %7s\n", "attn", "heads", "ctx", "body", "MB", "us", "GB/s",
                "% probe");
    std::string attn_json;
    for (const AttnShapeRow& as : ashapes)
      for (const int64_t ctx : {int64_t(4096), int64_t(32768), int64_t(262144)})
        for (const PackedFormat kf : {PackedFormat::KV8_PerHead, PackedFormat::KV4_PerHead}) {
          if (as.kv_heads == 32 && ctx > 32768) continue;  // 7B at 256K: 2 GiB a layer, and minutes of filling
          lowbit::PackedKvCache cache(kf, 1, as.kv_heads, as.dim, ctx);
          const int64_t C = int64_t(as.kv_heads) * as.dim, chunk = 4096;
          std::vector<float> kv(size_t(chunk * C));
          for (int64_t r0 = 0; r0 < ctx; r0 += chunk) {
            for (float& v : kv) v = nd(rng);
            cache.store(0, r0, kv.data(), kv.data(), std::min(chunk, ctx - r0));
          }
          const cuda::DeviceKvLayer body(cache, 0);
          std::vector<float> q(size_t(as.heads) * as.dim);
          for (float& v : q) v = nd(rng);
          cuda::DeviceBuffer qd(q.size() * sizeof(float)), od(q.size() * sizeof(float)), scratch;
          qd.upload(q.data(), qd.bytes());
          const AttnShape s{as.heads, as.kv_heads, as.dim, 0};
          const double ms = median_ms(10, 5, [&](int) {
            cuda::attention_packed(s, qd.as<float>(), nullptr, nullptr, 0, body, ctx - 1, 1, od.as<float>(), scratch);
          });
          const double bytes = double(body.bytes());
          const double gbs = bytes / (ms * 1e-3) / 1e9;
          const char* fname = lowbit::kv_traits(kf).name;
          std::printf("%-5s %3d/%-2d %8lld %-14s %10.1f %9.1f %8.0f %6.0f%%\n", as.model, as.heads, as.kv_heads,
                      (long long)ctx, fname, bytes / 1e6, ms * 1e3, gbs, 100.0 * gbs / probe_gbs);
          char buf[512];
          std::snprintf(buf, sizeof buf,
                        "%s{\"shape\": \"%s\", \"heads\": %d, \"kv_heads\": %d, \"head_dim\": %d, \"ctx\": %lld, "
                        "\"body\": \"%s\", \"bytes\": %.0f, \"us\": %.2f, \"gb_s\": %.1f, \"pct_probe\": %.1f}",
                        attn_json.empty() ? "" : ", ", as.model, as.heads, as.kv_heads, as.dim, (long long)ctx, fname,
                        bytes, ms * 1e3, gbs, 100.0 * gbs / probe_gbs);
          attn_json += buf;
        }
    // Decode attention over one layer's codebook body (KVQuant's nuqX, cuda::attention_codebook):
    // keys per channel, values per token, 1% outliers; with the keys stored before RoPE and rotated
    // in the kernel from cos | sin rows ("rope": their bytes are counted too) or after it. The 7B
    // shape at 1M tokens is KVQuant's headline (one GPU); ms per token = 32 such layers.
    struct CbRow {
      const char* model;
      int heads, kv_heads, dim, bits;
      double outliers;
      int64_t ctx;
      bool rope;
    };
    const CbRow cbrows[] = {{"1B", 32, 4, 64, 4, 0.0, 32768, false},   {"1B", 32, 4, 64, 3, 0.01, 32768, false},
                            {"1B", 32, 4, 64, 3, 0.01, 262144, true},  {"7B", 32, 32, 128, 3, 0.01, 32768, false},
                            {"7B", 32, 32, 128, 3, 0.01, 131072, true}, {"7B", 32, 32, 128, 3, 0.01, 1048576, false},
                            {"7B", 32, 32, 128, 3, 0.01, 1048576, true}};
    std::printf("\n%-5s %6s %8s %-14s %10s %9s %8s %7s %10s\n", "nuq", "heads", "ctx", "body", "MB", "us", "GB/s",
                "% probe", "ms/token*");
    std::string cb_json;
    for (const CbRow& cr : cbrows) {
      const int64_t C = int64_t(cr.kv_heads) * cr.dim;
      const SynthCb k = synth_cb(cr.ctx, C, cr.bits, true, cr.outliers, 1), v = synth_cb(cr.ctx, C, cr.bits, false, cr.outliers, 2);
      const cuda::DeviceCbLayer body(cr.kv_heads, cr.dim, cr.ctx, k.part(), v.part());
      cuda::DeviceBuffer csd;
      if (cr.rope) {
        std::vector<float> cs(size_t(cr.ctx * cr.dim));
        std::vector<double> inv(size_t(cr.dim / 2));
        for (int i = 0; i < cr.dim / 2; ++i) inv[size_t(i)] = std::pow(10000.0, -2.0 * i / cr.dim);
        for (int64_t j = 0; j < cr.ctx; ++j)
          for (int i = 0; i < cr.dim / 2; ++i) {
            const double a = double(j) * inv[size_t(i)];
            cs[size_t(j * cr.dim + i)] = float(std::cos(a)), cs[size_t(j * cr.dim + cr.dim / 2 + i)] = float(std::sin(a));
          }
        csd = cuda::DeviceBuffer(cs.size() * sizeof(float));
        csd.upload(cs.data(), csd.bytes());
      }
      std::vector<float> q(size_t(cr.heads) * cr.dim);
      for (float& x : q) x = nd(rng);
      cuda::DeviceBuffer qd(q.size() * sizeof(float)), od(q.size() * sizeof(float)), scratch;
      qd.upload(q.data(), qd.bytes());
      const AttnShape s{cr.heads, cr.kv_heads, cr.dim, 0};
      const double ms = median_ms(cr.ctx > 200000 ? 5 : 10, cr.ctx > 200000 ? 2 : 5, [&](int) {
        cuda::attention_codebook(s, qd.as<float>(), nullptr, nullptr, nullptr, 0, body, cr.ctx - 1, 1,
                                 cr.rope ? csd.as<float>() : nullptr, od.as<float>(), scratch);
      });
      const double bytes = double(body.bytes() + csd.bytes());
      const double gbs = bytes / (ms * 1e-3) / 1e9;
      char fname[64];
      std::snprintf(fname, sizeof fname, "nuq%d%s%s", cr.bits, cr.outliers > 0 ? "-1%" : "", cr.rope ? " rope" : "");
      std::printf("%-5s %3d/%-2d %8lld %-14s %10.1f %9.1f %8.0f %6.0f%% %10.1f\n", cr.model, cr.heads, cr.kv_heads,
                  (long long)cr.ctx, fname, bytes / 1e6, ms * 1e3, gbs, 100.0 * gbs / probe_gbs, 32 * ms);
      char buf[512];
      std::snprintf(buf, sizeof buf,
                    "%s{\"shape\": \"%s\", \"heads\": %d, \"kv_heads\": %d, \"head_dim\": %d, \"ctx\": %lld, "
                    "\"body\": \"%s\", \"bytes\": %.0f, \"us\": %.2f, \"gb_s\": %.1f, \"pct_probe\": %.1f, "
                    "\"ms_per_token_32_layers\": %.2f}",
                    cb_json.empty() ? "" : ", ", cr.model, cr.heads, cr.kv_heads, cr.dim, (long long)cr.ctx, fname, bytes,
                    ms * 1e3, gbs, 100.0 * gbs / probe_gbs, 32 * ms);
      cb_json += buf;
    }
    std::printf("* 32 layers of this one (a 7B has 32; a 1B has 22)\n");
    if (json_path) {
      FILE* jf = std::fopen(json_path, "w");
      if (!jf) fail("cannot write {}", json_path);
      std::fprintf(jf,
                   "{\"device\": \"%s\", \"driver\": %d, \"runtime\": %d, \"sm_clock_mhz\": %d, \"mem_clock_mhz\": %d, "
                   "\"probe_gb_s\": %.1f, \"gemv\": [%s], \"prefill\": [%s], \"attention\": [%s], \"codebook_attention\": [%s]}\n",
                   cuda::device_description().c_str(), driver, runtime, sm_clock / 1000, mem_clock / 1000, probe_gbs,
                   rows_json.c_str(), gemm_json.c_str(), attn_json.c_str(), cb_json.c_str());
      std::fclose(jf);
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cuda_linear_bench: error: %s\n", e.what());
    return 1;
  }
}
