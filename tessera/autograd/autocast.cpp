#include "tessera/autograd/autocast.h"

#include "tessera/core/error.h"

namespace tessera {

namespace {
thread_local DType current = DType::Float32;
}  // namespace

DType autocast_dtype() { return current; }

Autocast::Autocast(DType dtype) : previous_(current) {
  TESSERA_CHECK(dtype == DType::Float32 || dtype == DType::BFloat16 || dtype == DType::Float16,
                "[autocast] compute dtype must be float32, bfloat16 or float16, got ", dtype_name(dtype));
  current = dtype;
}

Autocast::~Autocast() { current = previous_; }

}  // namespace tessera
