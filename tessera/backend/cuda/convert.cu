#include <algorithm>
#include <cstdint>

#include "tessera/backend/cuda/convert.h"
#include "tessera/backend/cuda/cuda_check.h"

namespace tessera::cuda {
namespace {

// The bit arithmetic of float_to_bf16 in core/dtype.h, not CUDA's __float2bfloat16_rn: the two agree
// on every number, but CUDA's writes one canonical NaN (0x7fff) where ours keeps the sign and payload's
// top bits, and the CPU's encoding is the contract (tests/backend/cuda/convert_test.cpp compares them
// bit for bit). Memory-bound: 6 bytes moved per element, one thread per element, a grid-stride loop.
__global__ void float_to_bfloat16_kernel(const uint32_t* __restrict__ in, uint16_t* __restrict__ out, int64_t n) {
  const int64_t stride = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const uint32_t u = in[i];
    const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    const uint32_t nan = (u >> 16) | 0x40u;
    out[i] = static_cast<uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
  }
}

}  // namespace

void float_to_bfloat16(const DeviceBuffer& in, DeviceBuffer& out, int64_t n) {
  TESSERA_CHECK(n >= 0, "[cuda::float_to_bfloat16] negative count ", n);
  TESSERA_CHECK(in.bytes() >= static_cast<size_t>(n) * 4 && out.bytes() >= static_cast<size_t>(n) * 2,
                "[cuda::float_to_bfloat16] ", n, " elements need ", n * 4, " bytes in and ", n * 2,
                " out; the buffers hold ", in.bytes(), " and ", out.bytes());
  TESSERA_CHECK(in.device() == out.device(), "[cuda::float_to_bfloat16] in is on cuda:", in.device(), ", out on cuda:",
                out.device());
  if (n == 0) return;
  detail::use_device(in.device(), "cuda::float_to_bfloat16");
  constexpr int kThreads = 256;
  // Enough blocks to fill an H100's 132 SMs many times over; the loop covers the rest.
  const int64_t blocks = std::min<int64_t>((n + kThreads - 1) / kThreads, 132 * 32);
  float_to_bfloat16_kernel<<<static_cast<unsigned>(blocks), kThreads>>>(static_cast<const uint32_t*>(in.data()),
                                                                       static_cast<uint16_t*>(out.data()), n);
  TESSERA_CUDA_CHECK(cudaGetLastError());
}

}  // namespace tessera::cuda
