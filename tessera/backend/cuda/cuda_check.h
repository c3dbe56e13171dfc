// Every CUDA, cuBLASLt, cuDNN and NCCL call is checked: a failure throws with the call, file:line and
// the library's own name and text for the error. The only header of this folder that includes CUDA's;
// it is included by the backend's sources alone, never by a header the rest of tessera sees.
#pragma once
#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include "tessera/core/error.h"

namespace tessera::cuda::detail {

[[noreturn]] void throw_cuda_error(const char* call, cudaError_t error, const char* file, int line);
[[noreturn]] void throw_cublas_error(const char* call, cublasStatus_t status, const char* file, int line);

// Makes `device` current on this thread, checking that it exists first (a clear error rather than
// cudaErrorInvalidDevice from deep inside a call).
void use_device(int device, const char* op);

}  // namespace tessera::cuda::detail

#define TESSERA_CUDA_CHECK(call)                                                                  \
  do {                                                                                            \
    const cudaError_t tessera_cuda_status_ = (call);                                              \
    if (tessera_cuda_status_ != cudaSuccess)                                                      \
      ::tessera::cuda::detail::throw_cuda_error(#call, tessera_cuda_status_, __FILE__, __LINE__); \
  } while (0)

#define TESSERA_CUBLAS_CHECK(call)                                                                  \
  do {                                                                                              \
    const cublasStatus_t tessera_cublas_status_ = (call);                                           \
    if (tessera_cublas_status_ != CUBLAS_STATUS_SUCCESS)                                            \
      ::tessera::cuda::detail::throw_cublas_error(#call, tessera_cublas_status_, __FILE__, __LINE__); \
  } while (0)
