// Mixed precision (PyTorch's torch.autocast): inside an Autocast(DType::BFloat16) or
// Autocast(DType::Float16) scope, the ops that do matrix products round their operands to that
// precision and accumulate in float32; every other op stays float32. Tensors, parameters and
// gradients remain float32 (the optimizer's master weights): only the products' operands are
// rounded on their way into the kernel.
//
// The op lists, in this one place (PyTorch's CPU autocast lists, for the ops tessera has):
//   low precision: matmul (so attention's two products: scaled_dot_product_attention is built on it),
//                  linear, conv2d. Their backward runs in the precision their forward ran in.
//   float32:       everything else: softmax, log_softmax, cross_entropy, mse_loss, layer_norm,
//                  batch_norm, reductions, pointwise ops, embedding, pooling.
//
// The kernels (backend/cpu):
//   bf16: oneDNN's bf16 matmul and convolution. On this CPU (AMX and AVX-512 BF16) oneDNN 2.6 picks
//         AMX tiles (brg:avx512_core_amx_bf16), else vdpbf16ps kernels.
//   fp16: oneDNN 2.6 has no f16 matmul or convolution on CPUs ("could not create a primitive
//         descriptor" on this AVX512-FP16 machine), so the operands are rounded to fp16 (F16C) and
//         multiplied in float32: a product of two fp16 values is exact in float32, so this is the
//         arithmetic of fp16 tensor cores with fp32 accumulation, at float32's speed. It is here for
//         what fp16 training needs checking on a CPU: its range (operands past 65504 overflow to
//         inf, gradients below 2^-24 flush to zero), which dynamic loss scaling
//         (optim/grad_scaler.h) handles.
#pragma once
#include "tessera/core/dtype.h"

namespace tessera {

// The precision of matrix products on this thread now: Float32, BFloat16 or Float16.
DType autocast_dtype();

// Whether float32 matrix products and convolutions on a GPU may run on TF32 tensor cores (operands
// rounded to 10-bit mantissas, float32 accumulation): off unless asked (train.allow_tf32), as
// PyTorch's torch.backends.cuda.matmul.allow_tf32 is. Process-wide; the CPU ignores it.
void set_allow_tf32(bool allow);
bool allow_tf32();

class Autocast {
 public:
  // dtype: DType::BFloat16 or DType::Float16 (mixed precision), or DType::Float32 (turns it off
  // inside an outer scope).
  explicit Autocast(DType dtype);
  ~Autocast();
  Autocast(const Autocast&) = delete;
  Autocast& operator=(const Autocast&) = delete;

 private:
  DType previous_;
};

}  // namespace tessera
