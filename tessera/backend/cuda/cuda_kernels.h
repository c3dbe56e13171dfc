// The CUDA device's kernel table (ops/kernels.h), every entry of it (matmul and convolution are not
// in the table yet: those ops compute on the CPU alone). Elementwise formulas, copies and
// conversions, fills, sums over any dims and the sum of squares, softmax and log-softmax
// (elementwise.h); max over a dim, attention's weights, cross-entropy, layer and batch normalisation,
// embedding and index_select with their scatter-add backward, dropout's mask (nn_kernels.h); the
// fused SGD, Adam/AdamW, LAMB and LARS updates. Each equals the CPU's entry within float rounding
// (the scatter-adds bit for bit), except dropout's mask, drawn from a counter-based stream (the same
// keep rate and values, other elements). Entries that wait for the device: the index checks
// (embedding, index_select, cross-entropy's targets, which also bring back the loss's count) and
// LAMB's norms and squared_norm, which the host needs as numbers. The table turns tensors into the
// plain arguments of those kernels; it is part of the library in every build (a CPU-only build's
// kernels are no_cuda.cpp's errors, and no tensor reaches a CUDA device there anyway).
#pragma once
#include "tessera/ops/kernels.h"

namespace tessera::cuda {

const Kernels& cuda_kernels();

}  // namespace tessera::cuda
