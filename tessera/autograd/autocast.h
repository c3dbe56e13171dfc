// Mixed precision (PyTorch's torch.autocast on the CPU): inside an Autocast(DType::BFloat16) scope,
// the ops that do matrix products compute them in bfloat16 with float32 accumulation, and every
// other op stays float32. Tensors, parameters and gradients remain float32 (the optimizer's master
// weights): only the products' inputs are rounded to bf16 on their way into the kernel, which on a
// CPU with AVX-512 BF16 does two multiply-adds per fp32 lane (`vdpbf16ps`).
//
// The op lists, in this one place (PyTorch's CPU autocast lists, for the ops tessera has):
//   bf16:  matmul, linear (forward and backward: the backward uses the precision its forward ran in)
//   fp32:  everything else: convolution (not yet bf16 here), softmax, log_softmax, cross_entropy,
//          mse_loss, layer_norm, batch_norm, reductions, pointwise ops, embedding
#pragma once
#include "tessera/core/dtype.h"

namespace tessera {

// The precision of matrix products on this thread now: Float32 or BFloat16.
DType autocast_dtype();

class Autocast {
 public:
  // dtype: DType::BFloat16 (mixed precision) or DType::Float32 (turns it off inside an outer scope).
  explicit Autocast(DType dtype);
  ~Autocast();
  Autocast(const Autocast&) = delete;
  Autocast& operator=(const Autocast&) = delete;

 private:
  DType previous_;
};

}  // namespace tessera
