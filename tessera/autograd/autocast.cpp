#include "tessera/autograd/autocast.h"

#include "tessera/core/error.h"

namespace tessera {

namespace {
thread_local DType current = DType::Float32;
}  // namespace

DType autocast_dtype() { return current; }

Autocast::Autocast(DType dtype) : previous_(current) {
  TESSERA_CHECK(dtype == DType::Float32 || dtype == DType::BFloat16, "[autocast] compute dtype must be float32 or "
                "bfloat16, got ", dtype_name(dtype), " (fp16 needs loss scaling, not built yet)");
  current = dtype;
}

Autocast::~Autocast() { current = previous_; }

}  // namespace tessera
