// TESSERA_HOST_DEVICE: a function the CPU's loops and the CUDA kernels both call (nvcc compiles it
// for both; the host compiler inlines it into its vectorised loops).
#pragma once

#if defined(__CUDACC__)
#define TESSERA_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define TESSERA_HOST_DEVICE inline __attribute__((always_inline))
#endif
