// The CUDA device's kernel table (ops/kernels.h): what CUDA computes so far (elementwise formulas,
// copies and conversions, fills, sums over any dims, the sum of squares, softmax and log-softmax with
// their backward, the fused SGD, Adam/AdamW and LARS updates); every other entry is the base table's
// NotSupportedError naming the op. The table turns tensors into the plain arguments
// of the kernels in elementwise.h; it is part of the library in every build (a CPU-only build's
// kernels are no_cuda.cpp's errors, and no tensor reaches a CUDA device there anyway).
#pragma once
#include "tessera/ops/kernels.h"

namespace tessera::cuda {

const Kernels& cuda_kernels();

}  // namespace tessera::cuda
