// Helpers shared by the op implementations (not part of the public API).
#pragma once
#include <string>

#include "tessera/autograd/grad_mode.h"
#include "tessera/autograd/node.h"
#include "tessera/core/tensor.h"
#include "tessera/ops/ops.h"

namespace tessera::detail {

// Strides of `t` seen as broadcast to `shape` (0 on broadcast dims).
Shape broadcast_strides(const Tensor& t, const Shape& shape);
// Throws ValueError naming the op and the argument if `t` is undefined or not float32.
void check_float(const Tensor& t, const char* op, const char* arg);
void check_defined(const Tensor& t, const char* op, const char* arg);
void check_same_device(const Tensor& a, const Tensor& b, const char* op);
// A float32 contiguous tensor (a no-op when it already is).
Tensor as_contiguous(const Tensor& t);
// Strides of dims normalised, sorted and de-duplicated; empty `dims` means all dims.
Shape normalize_dims(const Shape& dims, int64_t ndim, const char* op);
// Shape after reducing `dims` (keepdim keeps them as 1).
Shape reduced_shape(const Shape& shape, const Shape& dims, bool keepdim);

}  // namespace tessera::detail
