// The GPU tests (suites named Cuda*, ctest label "gpu": tests/CMakeLists.txt) skip, saying why, where
// this process has no CUDA device: a CPU-only build, no driver, no GPU. CI on CPU machines therefore
// reports them as skipped, never as passed.
#pragma once
#include <gtest/gtest.h>

#include "tessera/backend/cuda/device_info.h"

#define TESSERA_SKIP_WITHOUT_CUDA_DEVICE()                                                \
  do {                                                                                    \
    if (::tessera::cuda::device_count() == 0)                                             \
      GTEST_SKIP() << "no CUDA device: " << ::tessera::cuda::unavailable_reason();        \
  } while (0)
