#include "tessera/dist/backends/mpi/mpi_types.h"

#include <mutex>

#include "tessera/core/error.h"
#include "tessera/dist/backends/mpi/mpi_runtime.h"

namespace tessera::dist::detail {

namespace {

// MPI_User_function: inout[i] = in[i] op inout[i]. The ops are commutative, so the order is free.
template <ReduceOp kOp>
void bfloat16_op(void* in, void* inout, int* length, MPI_Datatype*) {
  reduce_pair(inout, inout, in, *length, DType::BFloat16, kOp);
}

struct BFloat16Ops {
  MPI_Op sum = MPI_OP_NULL, max = MPI_OP_NULL, min = MPI_OP_NULL;
};

// Created once and never freed: MPI_Finalize releases them, and a communicator may still use them
// until then.
const BFloat16Ops& bfloat16_ops() {
  static const BFloat16Ops ops = [] {
    BFloat16Ops o;
    MpiLock lock;
    MPI_Op_create(&bfloat16_op<ReduceOp::Sum>, /*commute=*/1, &o.sum);
    MPI_Op_create(&bfloat16_op<ReduceOp::Max>, 1, &o.max);
    MPI_Op_create(&bfloat16_op<ReduceOp::Min>, 1, &o.min);
    return o;
  }();
  return ops;
}

}  // namespace

MPI_Datatype mpi_datatype(DType dtype) {
  switch (dtype) {
    case DType::Float32: return MPI_FLOAT;
    case DType::Int64: return MPI_INT64_T;
    case DType::BFloat16: return MPI_UINT16_T;
    case DType::Float16: return MPI_UINT16_T;  // moved as bytes; reductions refuse it (dist/types.cpp)
  }
  throw InternalError(tessera::detail::concat("internal error: mpi_datatype of dtype ", static_cast<int>(dtype)));
}

MPI_Op mpi_op(DType dtype, ReduceOp op) {
  TESSERA_ASSERT(op != ReduceOp::Avg, "Avg reaches the backend");
  if (dtype == DType::Float16)
    throw NotSupportedError("[collective] float16 is not reduced by tessera's backends; reduce in float32 or bfloat16");
  if (dtype == DType::BFloat16) {
    const BFloat16Ops& ops = bfloat16_ops();
    return op == ReduceOp::Sum ? ops.sum : op == ReduceOp::Max ? ops.max : ops.min;
  }
  return op == ReduceOp::Sum ? MPI_SUM : op == ReduceOp::Max ? MPI_MAX : MPI_MIN;
}

}  // namespace tessera::dist::detail
