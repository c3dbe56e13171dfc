// tessera's dtypes and reduction ops in MPI's terms. bfloat16 has no MPI type, so it travels as
// MPI_UINT16_T and reduces through user-defined ops over tessera's own kernel (reduce_pair), which
// accumulates through float32 and rounds to nearest even as the other backends do.
#pragma once
#include <mpi.h>

#include "tessera/dist/types.h"

namespace tessera::dist::detail {

MPI_Datatype mpi_datatype(DType dtype);
// MPI_SUM / MPI_MAX / MPI_MIN for float32 and int64; the bfloat16 ops are created on first use.
// op is never Avg (ProcessGroup sums, then divides).
MPI_Op mpi_op(DType dtype, ReduceOp op);

}  // namespace tessera::dist::detail
