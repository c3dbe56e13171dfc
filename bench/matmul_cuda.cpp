// tessera bench matmul --device cuda:N: TFLOP/s of cuda::gemm (cuBLASLt) at n×n in fp32, tf32 and bf16,
// beside torch.matmul on the same device in the same run (bench/torch_matmul.py), as a ratio.
// Each cell: 3 warm-up products, then the best of `repeats` batches of `iters` products, each batch
// timed from a synchronized device to a synchronized device (host clock: the batch is long enough,
// 20 products of at least 2048³, that the two synchronizations are under 1% of it).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "bench/bench.h"
#include "bench/test_hosts.h"
#include "tessera/backend/cuda/convert.h"
#include "tessera/backend/cuda/device_info.h"
#include "tessera/backend/cuda/gemm.h"
#include "tessera/core/error.h"

namespace tessera::bench {
namespace {

cuda::GemmPrecision parse_precision(const std::string& name) {
  if (name == "fp32") return cuda::GemmPrecision::kFloat32;
  if (name == "tf32") return cuda::GemmPrecision::kTensorFloat32;
  if (name == "bf16") return cuda::GemmPrecision::kBFloat16;
  throw ValueError("[bench matmul] precision '" + name + "': expected fp32, tf32 or bf16");
}

double tessera_tflops(int device, int64_t n, cuda::GemmPrecision precision, int repeats, int iters) {
  std::vector<float> host(static_cast<size_t>(n * n));
  std::mt19937 rng(0);
  std::normal_distribution<float> normal;
  for (float& x : host) x = normal(rng);
  cuda::DeviceBuffer a(device, host.size() * 4);
  a.copy_from_host(host.data(), host.size() * 4);
  if (precision == cuda::GemmPrecision::kBFloat16) {  // A in bfloat16, rounded on the device
    cuda::DeviceBuffer bf16(device, host.size() * 2);
    cuda::float_to_bfloat16(a, bf16, n * n);
    a = std::move(bf16);
  }
  cuda::DeviceBuffer c(device, host.size() * 4);
  for (int i = 0; i < 3; ++i) cuda::gemm(precision, a, a, c, n, n, n);
  cuda::synchronize(device);
  double best = 1e30;
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) cuda::gemm(precision, a, a, c, n, n, n);
    cuda::synchronize(device);
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / iters);
  }
  return 2.0 * static_cast<double>(n) * n * n / best / 1e12;
}

}  // namespace

int matmul_cuda(const CudaMatmulOptions& options) {
  TESSERA_CHECK(options.device.rfind("cuda:", 0) == 0, "[bench matmul] --device '", options.device,
                "': expected cpu or cuda:N");
  const int device = std::stoi(options.device.substr(5));
  if (cuda::device_count() == 0) {
    std::fprintf(stderr, "bench matmul: no CUDA device: %s\n", cuda::unavailable_reason().c_str());
    return 1;
  }
  const cuda::DeviceProperties properties = cuda::device_properties(device);
  std::printf("tessera bench matmul: %s (cuda:%d, sm_%d%d), cuBLASLt; best of %d batches of %d products\n",
              properties.name.c_str(), device, properties.major, properties.minor, options.repeats, options.iters);
  for (const cuda::LibraryVersion& v : cuda::library_versions())
    std::printf("  %s %s\n", v.name.c_str(), v.loaded.c_str());

  std::map<std::pair<int64_t, std::string>, double> torch_tflops;
  if (options.with_torch) {
    std::ostringstream cmd;
    cmd << options.python << " " << options.script << " --sizes " << options.sizes << " --precisions "
        << options.precisions << " --repeats " << options.repeats << " --iters " << options.iters << " --device "
        << options.device;
    const CommandOutput run = run_capture(cmd.str(), 600);
    const nlohmann::json reference = last_json_line(run.out);
    if (run.ok && reference.contains("results")) {
      std::printf("reference: pytorch %s (CUDA %s) torch.matmul\n", reference.value("torch_version", "?").c_str(),
                  reference.value("torch_cuda", "?").c_str());
      for (const auto& r : reference["results"])
        torch_tflops[{r["n"].get<int64_t>(), r["precision"].get<std::string>()}] = r["tflops"].get<double>();
    } else {
      std::printf("reference: PyTorch did not run (%s): %s\n", cmd.str().c_str(), reference.dump().c_str());
    }
  }
  std::printf("%-8s %-10s %-16s %-16s %s\n", "n", "precision", "tessera TFLOP/s", "pytorch TFLOP/s", "tessera/pytorch");
  for (const std::string& size : split_list(options.sizes)) {
    const int64_t n = std::stoll(size);
    for (const std::string& name : split_list(options.precisions)) {
      const double ours = tessera_tflops(device, n, parse_precision(name), options.repeats, options.iters);
      const auto it = torch_tflops.find({n, name});
      if (it == torch_tflops.end()) {
        std::printf("%-8lld %-10s %-16.1f %-16s %s\n", static_cast<long long>(n), name.c_str(), ours, "-", "-");
      } else {
        std::printf("%-8lld %-10s %-16.1f %-16.1f %.2fx\n", static_cast<long long>(n), name.c_str(), ours, it->second,
                    ours / it->second);
      }
    }
  }
  return 0;
}

}  // namespace tessera::bench
