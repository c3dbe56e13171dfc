#include "tessera/backend/cuda/device_info.h"

#include <cublas_api.h>
#include <cudnn.h>
#include <nccl.h>

#include "tessera/backend/cuda/cuda_check.h"

namespace tessera::cuda {
namespace detail {

void throw_cuda_error(const char* call, cudaError_t error, const char* file, int line) {
  std::string message = tessera::detail::concat("[cuda] ", call, " failed at ", file, ":", line, ": ",
                                                cudaGetErrorName(error), " (", cudaGetErrorString(error), ")");
  cudaGetLastError();  // clear the sticky-free error state so that the next call starts clean
  if (error == cudaErrorMemoryAllocation) throw OutOfMemoryError(message);
  if (error == cudaErrorNoDevice || error == cudaErrorInsufficientDriver || error == cudaErrorInvalidDevice)
    throw NotSupportedError(message);
  throw Error(message);
}

void throw_cublas_error(const char* call, cublasStatus_t status, const char* file, int line) {
  std::string message = tessera::detail::concat("[cublasLt] ", call, " failed at ", file, ":", line, ": ",
                                                cublasLtGetStatusName(status), " (", cublasLtGetStatusString(status), ")");
  if (status == CUBLAS_STATUS_ALLOC_FAILED) throw OutOfMemoryError(message);
  if (status == CUBLAS_STATUS_NOT_SUPPORTED || status == CUBLAS_STATUS_ARCH_MISMATCH) throw NotSupportedError(message);
  throw Error(message);
}

void use_device(int device, const char* op) {
  const int count = device_count();
  if (count == 0)
    throw NotSupportedError(tessera::detail::concat("[", op, "] cuda:", device, " is not usable, no CUDA device: ",
                                                    unavailable_reason()));
  TESSERA_CHECK(device >= 0 && device < count, "[", op, "] cuda:", device, " does not exist: this process sees ",
                count, " CUDA device(s) (cuda:0..cuda:", count - 1, "; CUDA_VISIBLE_DEVICES chooses them)");
  TESSERA_CUDA_CHECK(cudaSetDevice(device));
}

}  // namespace detail

namespace {

// The runtime is asked once: without a driver each call would try to load libcuda.so.1 again.
struct Probe {
  int count = 0;
  std::string reason;
};

const Probe& probe() {
  static const Probe result = [] {
    Probe p;
    const cudaError_t error = cudaGetDeviceCount(&p.count);
    if (error != cudaSuccess) {
      p.count = 0;
      p.reason = tessera::detail::concat("cudaGetDeviceCount: ", cudaGetErrorName(error), " (",
                                         cudaGetErrorString(error), ")");
      if (error == cudaErrorInsufficientDriver || error == cudaErrorNoDevice)
        p.reason += "; a machine without an NVIDIA GPU and driver runs tessera on the CPU";
      cudaGetLastError();
    } else if (p.count == 0) {
      p.reason = "the driver reports no CUDA device (is CUDA_VISIBLE_DEVICES empty?)";
    }
    return p;
  }();
  return result;
}

// CUDA's integers as "major.minor[.patch]": the runtime's and driver's 13000 is 13.0.
std::string cuda_version_text(int v) {
  if (v <= 0) return "none";
  return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10);
}
// cuBLASLt, cuDNN 9 and NCCL 2.9+ write major*10000 + minor*100 + patch; cuDNN 8 and NCCL before 2.9
// wrote major*1000 + minor*100 + patch (their values stay under 10000).
std::string ten_thousands_version_text(long v) {
  if (v <= 0) return "none";
  const long major_unit = v >= 10000 ? 10000 : 1000;
  return std::to_string(v / major_unit) + "." + std::to_string(v % major_unit / 100) + "." + std::to_string(v % 100);
}

}  // namespace

bool compiled() { return true; }

int device_count() { return probe().count; }

std::string unavailable_reason() { return probe().reason; }

DeviceProperties device_properties(int index) {
  detail::use_device(index, "cuda::device_properties");
  cudaDeviceProp prop{};
  TESSERA_CUDA_CHECK(cudaGetDeviceProperties(&prop, index));
  DeviceProperties out;
  out.index = index;
  out.name = prop.name;
  out.major = prop.major;
  out.minor = prop.minor;
  out.total_memory = static_cast<int64_t>(prop.totalGlobalMem);
  out.multiprocessors = prop.multiProcessorCount;
  size_t free_bytes = 0, total_bytes = 0;
  TESSERA_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  out.free_memory = static_cast<int64_t>(free_bytes);
  return out;
}

std::vector<LibraryVersion> library_versions() {
  int driver = 0, runtime = 0, nccl = 0;
  if (cudaDriverGetVersion(&driver) != cudaSuccess) driver = 0;
  if (cudaRuntimeGetVersion(&runtime) != cudaSuccess) runtime = 0;
  if (ncclGetVersion(&nccl) != ncclSuccess) nccl = 0;
  return {
      {"CUDA driver (API)", cuda_version_text(driver), ""},
      {"CUDA runtime", cuda_version_text(runtime), cuda_version_text(CUDART_VERSION)},
      {"cuBLASLt", ten_thousands_version_text(static_cast<long>(cublasLtGetVersion())),
       ten_thousands_version_text(CUBLAS_VERSION)},
      {"cuDNN", ten_thousands_version_text(static_cast<long>(cudnnGetVersion())), ten_thousands_version_text(CUDNN_VERSION)},
      {"NCCL", ten_thousands_version_text(nccl), ten_thousands_version_text(NCCL_VERSION_CODE)},
  };
}

void synchronize(int device) {
  detail::use_device(device, "cuda::synchronize");
  TESSERA_CUDA_CHECK(cudaDeviceSynchronize());
}

}  // namespace tessera::cuda
