#include "tessera/autograd/autocast.h"

#include <atomic>

#include "tessera/core/error.h"

namespace tessera {

namespace {
thread_local DType current = DType::Float32;
}  // namespace

DType autocast_dtype() { return current; }

namespace {
std::atomic<bool> tf32_allowed{false};
}  // namespace

void set_allow_tf32(bool allow) { tf32_allowed.store(allow, std::memory_order_relaxed); }
bool allow_tf32() { return tf32_allowed.load(std::memory_order_relaxed); }

Autocast::Autocast(DType dtype) : previous_(current) {
  TESSERA_CHECK(dtype == DType::Float32 || dtype == DType::BFloat16 || dtype == DType::Float16,
                "[autocast] compute dtype must be float32, bfloat16 or float16, got ", dtype_name(dtype));
  current = dtype;
}

Autocast::~Autocast() { current = previous_; }

}  // namespace tessera
