// sinkq/kernels/isa_region.h — SINKQ_ISA_BEGIN("avx2,fma,f16c") ... SINKQ_ISA_END: the code between
// them is compiled for that ISA (the per-ISA kernel files; placed after every #include, so no
// libstdc++ inline function is emitted with instructions an older CPU lacks). GCC: push_options +
// target; clang (the fuzz build, scripts/fuzz.sh), which ignores GCC's target pragma: a target
// attribute on every function of the region.
#pragma once

#define SINKQ_PRAGMA(x) _Pragma(#x)
#if defined(__clang__)
#define SINKQ_ISA_BEGIN(features) \
  SINKQ_PRAGMA(clang attribute push(__attribute__((target(features))), apply_to = function))
#define SINKQ_ISA_END SINKQ_PRAGMA(clang attribute pop)
#else
#define SINKQ_ISA_BEGIN(features) SINKQ_PRAGMA(GCC push_options) SINKQ_PRAGMA(GCC target(features))
#define SINKQ_ISA_END SINKQ_PRAGMA(GCC pop_options)
#endif
