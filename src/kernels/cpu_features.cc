// sinkq/kernels/cpu_features.cc — run-time ISA detection and the SINKQ_ISA override.
//
// detected_isa(): AVX-512 needs F+BW+VL (masked 16-bit loads for bf16/f16 tails) plus FMA and
// F16C; AVX2 needs FMA and F16C (fp16 widening). Anything less takes the scalar path.
// active_isa(): SINKQ_ISA (read once) or set_isa() may only lower it; asking for more than the
// CPU has is a sinkq::Error, never a silent fallback or an illegal-instruction crash.
#include "kernels/cpu_features.h"

#include <cpuid.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>
#include <string>

#include "core/error.h"

namespace sinkq {
namespace {

// F16C from CPUID leaf 1 (ECX bit 29): clang 14's __builtin_cpu_supports does not know "f16c".
bool has_f16c() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C) != 0;
}

Isa detect() {
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && has_f16c();
  const bool avx512 = avx2 && __builtin_cpu_supports("avx512f") &&
                      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
  return avx512 ? Isa::Avx512 : avx2 ? Isa::Avx2 : Isa::Scalar;
}

std::optional<Isa> parse(std::string_view s) {
  if (s == "scalar") return Isa::Scalar;
  if (s == "avx2") return Isa::Avx2;
  if (s == "avx512") return Isa::Avx512;
  return std::nullopt;
}

void check_supported(Isa want, std::string_view who) {
  SINKQ_CHECK(int(want) <= int(detected_isa()),
              "{}: ISA '{}' requested but this CPU only supports up to '{}'", who, isa_name(want),
              isa_name(detected_isa()));
}

// -1: not yet initialised from the environment.
std::atomic<int> g_active{-1};
std::once_flag g_env_once;

}  // namespace

Isa detected_isa() {
  static const Isa d = detect();
  return d;
}

std::string_view isa_name(Isa isa) {
  switch (isa) {
    case Isa::Scalar: return "scalar";
    case Isa::Avx2: return "avx2";
    case Isa::Avx512: return "avx512";
  }
  return "?";
}

Isa active_isa() {
  int a = g_active.load(std::memory_order_relaxed);
  if (a >= 0) return Isa(a);
  // First use: honour SINKQ_ISA. An invalid value throws here (every call, until fixed), which
  // surfaces as the error of the first kernel call; the CLI prints it.
  std::call_once(g_env_once, [] {
    Isa isa = detected_isa();
    if (const char* env = std::getenv("SINKQ_ISA"); env && *env) {
      auto p = parse(env);
      SINKQ_CHECK(p.has_value(), "SINKQ_ISA='{}': expected scalar, avx2 or avx512", env);
      check_supported(*p, "SINKQ_ISA");
      isa = *p;
    }
    int expected = -1;
    g_active.compare_exchange_strong(expected, int(isa));  // set_isa() may have won the race
  });
  return Isa(g_active.load(std::memory_order_relaxed));
}

std::string cpu_description() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  char vendor[13] = {};
  if (__get_cpuid(0, &a, &b, &c, &d)) {
    std::memcpy(vendor, &b, 4);
    std::memcpy(vendor + 4, &d, 4);
    std::memcpy(vendor + 8, &c, 4);
  }
  unsigned family = 0, model = 0;
  if (__get_cpuid(1, &a, &b, &c, &d)) {
    family = (a >> 8) & 0xf;
    model = (a >> 4) & 0xf;
    if (family == 0xf) family += (a >> 20) & 0xff;  // extended family
    if (family == 0x6 || family >= 0xf) model += ((a >> 16) & 0xf) << 4;  // extended model
  }
  std::string brand;
  if (__get_cpuid(0x80000000u, &a, &b, &c, &d) && a >= 0x80000004u) {
    char buf[49] = {};
    for (unsigned leaf = 0; leaf < 3; ++leaf) {
      unsigned r[4];
      __get_cpuid(0x80000002u + leaf, &r[0], &r[1], &r[2], &r[3]);
      std::memcpy(buf + 16 * leaf, r, 16);
    }
    brand = buf;
    brand.erase(0, brand.find_first_not_of(' '));
    brand.erase(brand.find_last_not_of(' ') + 1);
  }
  std::string out = brand.empty() ? std::string("unknown CPU") : brand;
  out += " (" + std::string(vendor) + " family " + std::to_string(family) + " model " + std::to_string(model) + ")";
  return out;
}

void set_isa(Isa isa) {
  check_supported(isa, "set_isa");
  g_active.store(int(isa), std::memory_order_relaxed);
}

}  // namespace sinkq
