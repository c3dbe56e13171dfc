// The CPU table's matrix product: the matmul op itself (ops/matmul.cpp), which keeps its CPU paths
// (oneDNN's batched products, bf16 operands rounded once and kept for the backward, gradients
// written into DDP's buckets) outside the table; this entry lets code written against the table,
// and the GPU tests' comparisons, ask the CPU the same question as a device.
#include "tessera/autograd/autocast.h"
#include "tessera/backend/cpu/cpu_kernels.h"

namespace tessera::cpu {

Tensor CpuKernels::matmul(const Tensor& a, const Tensor& b, const Tensor& bias, DType precision) const {
  NoGradGuard no_grad;
  Autocast as_asked(precision);
  Tensor out = tessera::matmul(a, b);
  return bias.defined() ? add(out, bias) : out;
}

}  // namespace tessera::cpu
