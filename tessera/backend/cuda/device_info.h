// What CUDA this build and this machine offer. No CUDA header is included here or in any header of
// this folder but cuda_check.h: the rest of tessera, and a CPU-only build (TESSERA_CUDA=OFF, or a
// machine without the toolkit), sees plain C++. A CPU-only build compiles no_cuda.cpp behind the same
// functions (MLX's no_X pattern), so callers never need an #ifdef.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace tessera::cuda {

// Whether this build has the CUDA backend (CMake's TESSERA_CUDA found nvcc, cuBLASLt, cuDNN and NCCL).
bool compiled();

// Devices this process can use: 0 where there is no driver, no device, CUDA_VISIBLE_DEVICES hides them
// all, or the build is CPU-only. unavailable_reason() then says which, in words a user can act on; it
// is empty when a device is there.
int device_count();
std::string unavailable_reason();

struct DeviceProperties {
  int index = 0;
  std::string name;
  int major = 0, minor = 0;  // compute capability: 9.0 on the H100 and H200
  int64_t total_memory = 0;  // bytes
  int multiprocessors = 0;
  int64_t free_memory = 0;   // bytes, when read
};
DeviceProperties device_properties(int index);

// The CUDA driver, runtime, cuBLASLt, cuDNN and NCCL this process loaded, and those it was compiled
// against, e.g. {"cuDNN", "9.13.0", "9.13.0"}. Loaded versions are read from the libraries themselves,
// so a GPU machine with other copies than the build machine's says which ones it used.
struct LibraryVersion {
  std::string name;
  std::string loaded;    // "none" where the library (the driver) is absent
  std::string compiled;  // "" where not applicable
};
std::vector<LibraryVersion> library_versions();

// Waits until every kernel and copy queued on `device` has finished (benchmarks and tests only: the
// training path orders work with streams and events, never a host wait).
void synchronize(int device);

}  // namespace tessera::cuda
