// sinkq/kernels/cpu_features.h — which SIMD path the kernels take.
//
// Detected once with __builtin_cpu_supports. SINKQ_ISA=scalar|avx2|avx512 in the environment
// forces a lower path (never a higher one than the CPU has: that is an error), so the AVX2 and
// scalar paths stay tested on AVX-512 machines.
#pragma once

#include <string>
#include <string_view>

namespace sinkq {

enum class Isa { Scalar = 0, Avx2 = 1, Avx512 = 2 };

Isa detected_isa();               // best the CPU supports (AVX2 requires FMA+F16C; AVX-512 F+BW+VL)
Isa active_isa();                 // detected, or forced by SINKQ_ISA / set_isa
void set_isa(Isa isa);            // for tests; throws sinkq::Error if above detected_isa()
std::string_view isa_name(Isa isa);
// The CPU as CPUID names it: "<brand> (<vendor> family F model M)", e.g. "Intel(R) Xeon(R) Processor
// (GenuineIntel family 6 model 207)". The BLAS libraries pick their kernels per family / model (ops.h
// sgemm_backend), so every benchmark table and test log names it.
std::string cpu_description();

}  // namespace sinkq
