// The CUDA backend of a CPU-only build (TESSERA_CUDA=OFF, or no toolkit where CMake configured): the
// same functions, no CUDA header, and an error that says why wherever a device is asked for.
// TESSERA_NO_CUDA_REASON is CMake's own account (cmake/cuda.cmake).
#include "tessera/backend/cuda/allocator.h"
#include "tessera/backend/cuda/conv.h"
#include "tessera/backend/cuda/convert.h"
#include "tessera/backend/cuda/device_buffer.h"
#include "tessera/backend/cuda/device_info.h"
#include "tessera/backend/cuda/elementwise.h"
#include "tessera/backend/cuda/gemm.h"
#include "tessera/backend/cuda/nn_kernels.h"
#include "tessera/backend/cuda/stream.h"
#include "tessera/core/error.h"

#ifndef TESSERA_NO_CUDA_REASON
#define TESSERA_NO_CUDA_REASON "TESSERA_CUDA=OFF"
#endif

namespace tessera::cuda {
namespace {

[[noreturn]] void no_cuda(const char* op, const std::string& device = "cuda") {
  throw NotSupportedError(tessera::detail::concat("[", op, "] ", device, " is not usable: this tessera was built without CUDA (",
                                                  TESSERA_NO_CUDA_REASON, "): reconfigure with -DTESSERA_CUDA=ON "
                                                  "on a machine with nvcc, cuBLASLt, cuDNN and NCCL"));
}

// Storage asks it for memory on cuda:N; every request is the error above, naming the device.
class NoCudaAllocator final : public Allocator {
 public:
  void* allocate(size_t, Device device) override { no_cuda("cuda::tensor_allocator", device.str()); }
  void deallocate(void*, size_t, Device) override {}
  AllocatorStats stats(Device) const override { return {}; }
  void reset_peak(Device) override {}
  void empty_cache() override {}
};

}  // namespace

bool compiled() { return false; }
int device_count() { return 0; }
std::string unavailable_reason() {
  return std::string("built without CUDA (") + TESSERA_NO_CUDA_REASON + ")";
}
DeviceProperties device_properties(int) { no_cuda("cuda::device_properties"); }
std::vector<LibraryVersion> library_versions() { return {}; }
void synchronize(int) { no_cuda("cuda::synchronize"); }

DeviceBuffer::DeviceBuffer(int device, size_t) { no_cuda("cuda::DeviceBuffer", "cuda:" + std::to_string(device)); }
DeviceBuffer::~DeviceBuffer() = default;
DeviceBuffer::DeviceBuffer(DeviceBuffer&&) noexcept = default;
DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&&) noexcept = default;
void DeviceBuffer::release() noexcept {}
void DeviceBuffer::copy_from_host(const void*, size_t, size_t) { no_cuda("cuda::DeviceBuffer::copy_from_host"); }
void DeviceBuffer::copy_to_host(void*, size_t, size_t) const { no_cuda("cuda::DeviceBuffer::copy_to_host"); }

void gemm(GemmPrecision, const DeviceBuffer&, const DeviceBuffer&, DeviceBuffer&, int64_t, int64_t, int64_t) {
  no_cuda("cuda::gemm");
}

void gemm_batched(int, GemmPrecision, const GemmOperand&, const GemmOperand&, float*, int64_t, const float*) {
  no_cuda("cuda::gemm_batched");
}

void conv2d_forward(int, ElementType, const ConvGeometry&, const void*, const void*, void*, bool) {
  no_cuda("cuda::conv2d_forward");
}
void conv2d_backward_data(int, ElementType, const ConvGeometry&, const void*, const void*, void*, bool) {
  no_cuda("cuda::conv2d_backward_data");
}
void conv2d_backward_filter(int, ElementType, const ConvGeometry&, const void*, const void*, void*, bool) {
  no_cuda("cuda::conv2d_backward_filter");
}
void max_pool2d(int, const PoolGeometry&, const float*, bool, float*, int64_t*) { no_cuda("cuda::max_pool2d"); }
void max_pool2d_backward(int, const PoolGeometry&, const float*, const int64_t*, float*) {
  no_cuda("cuda::max_pool2d_backward");
}
void avg_pool2d(int, const PoolGeometry&, const float*, float*) { no_cuda("cuda::avg_pool2d"); }
void avg_pool2d_backward(int, const PoolGeometry&, const float*, float*) { no_cuda("cuda::avg_pool2d_backward"); }

void float_to_bfloat16(const DeviceBuffer&, DeviceBuffer&, int64_t) { no_cuda("cuda::float_to_bfloat16"); }

void unary(int device, UnaryOp, float, const float*, const Strides&, float*, const IterationShape&) {
  no_cuda("cuda::unary", "cuda:" + std::to_string(device));
}
void binary(int device, BinaryOp, float, const float*, const Strides&, const float*, const Strides&, float*,
            const IterationShape&) {
  no_cuda("cuda::binary", "cuda:" + std::to_string(device));
}
void copy(int device, void*, ElementType, const Strides&, const void*, ElementType, const Strides&,
          const IterationShape&) {
  no_cuda("cuda::copy", "cuda:" + std::to_string(device));
}
void fill(int device, float*, const Strides&, const IterationShape&, float) {
  no_cuda("cuda::fill", "cuda:" + std::to_string(device));
}
void add_scaled(int device, float*, const Strides&, const float*, const Strides&, const IterationShape&, float) {
  no_cuda("cuda::add_scaled", "cuda:" + std::to_string(device));
}
void scale(int device, float*, const Strides&, const IterationShape&, float) {
  no_cuda("cuda::scale", "cuda:" + std::to_string(device));
}
void sgd_update(int device, float*, const float*, float*, int64_t, const SgdStep&) {
  no_cuda("cuda::sgd_update", "cuda:" + std::to_string(device));
}
void adam_update(int device, float*, const float*, float*, float*, int64_t, const AdamStep&) {
  no_cuda("cuda::adam_update", "cuda:" + std::to_string(device));
}
void lars_update(int device, float*, const float*, float*, int64_t, float, float, float) {
  no_cuda("cuda::lars_update", "cuda:" + std::to_string(device));
}
std::pair<double, double> lamb_moments(int device, const float*, const float*, float*, float*, int64_t, const LambStep&,
                                       void*) {
  no_cuda("cuda::lamb_moments", "cuda:" + std::to_string(device));
}
void lamb_apply(int device, float*, const float*, const float*, int64_t, const LambStep&, float) {
  no_cuda("cuda::lamb_apply", "cuda:" + std::to_string(device));
}

void sum_rows(int device, const float*, int64_t, int64_t, float*) {
  no_cuda("cuda::sum_rows", "cuda:" + std::to_string(device));
}
double squared_norm(int device, const float*, int64_t, double*) { no_cuda("cuda::squared_norm", "cuda:" + std::to_string(device)); }
void softmax_rows(int device, const float*, int64_t, int64_t, bool, float*) {
  no_cuda("cuda::softmax_rows", "cuda:" + std::to_string(device));
}
void softmax_rows_backward(int device, const float*, const float*, int64_t, int64_t, bool, float*) {
  no_cuda("cuda::softmax_rows_backward", "cuda:" + std::to_string(device));
}

void max_over_dim(int device, const float*, int64_t, int64_t, int64_t, float*, int64_t*) {
  no_cuda("cuda::max_over_dim", "cuda:" + std::to_string(device));
}
void max_over_dim_backward(int device, const float*, const int64_t*, int64_t, int64_t, int64_t, float*) {
  no_cuda("cuda::max_over_dim_backward", "cuda:" + std::to_string(device));
}
void attention_rows(int device, const float*, int64_t, int64_t, int64_t, float, bool, float*) {
  no_cuda("cuda::attention_rows", "cuda:" + std::to_string(device));
}
void attention_rows_backward(int device, const float*, const float*, int64_t, int64_t, int64_t, float, bool, float*) {
  no_cuda("cuda::attention_rows_backward", "cuda:" + std::to_string(device));
}
CrossEntropySummary cross_entropy_rows(int device, const float*, const int64_t*, int64_t, int64_t, int64_t, float,
                                       float*, float*, void*) {
  no_cuda("cuda::cross_entropy_rows", "cuda:" + std::to_string(device));
}
void cross_entropy_rows_backward(int device, const float*, const int64_t*, const float*, const float*, int64_t,
                                 int64_t, int64_t, float, int64_t, float*) {
  no_cuda("cuda::cross_entropy_rows_backward", "cuda:" + std::to_string(device));
}
void layer_norm_rows(int device, const float*, const float*, const float*, int64_t, int64_t, float, float*, float*) {
  no_cuda("cuda::layer_norm_rows", "cuda:" + std::to_string(device));
}
void layer_norm_rows_backward(int device, const float*, const float*, const float*, const float*, int64_t, int64_t,
                              float*, float*, float*, float*) {
  no_cuda("cuda::layer_norm_rows_backward", "cuda:" + std::to_string(device));
}
void batch_norm_channels(int device, const float*, int64_t, int64_t, int64_t, float*, int64_t, float*, int64_t,
                         const float*, const float*, bool, float, float, float*, float*) {
  no_cuda("cuda::batch_norm_channels", "cuda:" + std::to_string(device));
}
void batch_norm_channels_backward(int device, const float*, const float*, const float*, const float*, int64_t, int64_t,
                                  int64_t, bool, float*, float*, float*) {
  no_cuda("cuda::batch_norm_channels_backward", "cuda:" + std::to_string(device));
}
IndexCheck check_indices(int device, const int64_t*, int64_t, int64_t, void*) {
  no_cuda("cuda::check_indices", "cuda:" + std::to_string(device));
}
void gather_rows(int device, const float*, const int64_t*, int64_t, int64_t, int64_t, int64_t, float*) {
  no_cuda("cuda::gather_rows", "cuda:" + std::to_string(device));
}
size_t scatter_add_scratch_bytes(int device, int64_t, int64_t) {
  no_cuda("cuda::scatter_add_scratch_bytes", "cuda:" + std::to_string(device));
}
void scatter_add_rows(int device, const float*, const int64_t*, int64_t, int64_t, int64_t, int64_t, float*, void*) {
  no_cuda("cuda::scatter_add_rows", "cuda:" + std::to_string(device));
}
void dropout_mask(int device, float*, int64_t, float, float, uint64_t) {
  no_cuda("cuda::dropout_mask", "cuda:" + std::to_string(device));
}

Stream& compute_stream(int device) { no_cuda("cuda::compute_stream", "cuda:" + std::to_string(device)); }
std::unique_ptr<Stream> make_stream(int device) { no_cuda("cuda::make_stream", "cuda:" + std::to_string(device)); }

Allocator& tensor_allocator() {
  static NoCudaAllocator allocator;
  return allocator;
}

void copy_host_to_device(void*, const void*, size_t, int) { no_cuda("cuda::copy_host_to_device"); }
void copy_device_to_host(void*, const void*, size_t, int) { no_cuda("cuda::copy_device_to_host"); }
void copy_device_to_device(void*, int, const void*, int, size_t) { no_cuda("cuda::copy_device_to_device"); }

}  // namespace tessera::cuda
