// sinkq/formats/device.h — SINKQ_HD: marks a plain function as callable from host and device code.
//
// The formats/ headers are shared by C++ and (later) CUDA translation units. A function marked
// SINKQ_HD is compiled for the host by every C++ compiler and, under nvcc (__CUDACC__), also for
// the device, so a CUDA kernel can call the same scalar reference that the CPU path uses.
#pragma once

#if defined(__CUDACC__)
#define SINKQ_HD __host__ __device__
#else
#define SINKQ_HD
#endif
