#include "tessera/backend/cuda/gemm.h"

#include <map>
#include <memory>
#include <mutex>

#include "tessera/backend/cuda/cuda_check.h"

namespace tessera::cuda {
namespace {

// cuBLAS's guide asks for 32 MiB of workspace on Hopper (sm_90) so that every kernel it would choose
// can run; less rules out some of the fastest split-K kernels.
constexpr size_t kWorkspaceBytes = 32u << 20;

struct LtContext {
  cublasLtHandle_t handle = nullptr;
  DeviceBuffer workspace;
};

// One handle and workspace per device, made on first use. They are never destroyed: at process exit
// the CUDA runtime may already be unloaded, and freeing then fails (PyTorch keeps its handles so too).
LtContext& lt_context(int device) {
  static std::mutex mutex;
  static auto* contexts = new std::map<int, LtContext*>();
  std::lock_guard lock(mutex);
  LtContext*& slot = (*contexts)[device];
  if (slot == nullptr) {
    auto context = std::make_unique<LtContext>();
    TESSERA_CUBLAS_CHECK(cublasLtCreate(&context->handle));
    context->workspace = DeviceBuffer(device, kWorkspaceBytes);
    slot = context.release();
  }
  return *slot;
}

template <typename T, cublasStatus_t (*destroy)(T)>
struct LtDeleter {
  void operator()(T descriptor) const { destroy(descriptor); }
};
using MatmulDesc = std::unique_ptr<cublasLtMatmulDescOpaque_t, LtDeleter<cublasLtMatmulDesc_t, cublasLtMatmulDescDestroy>>;
using Layout = std::unique_ptr<cublasLtMatrixLayoutOpaque_t, LtDeleter<cublasLtMatrixLayout_t, cublasLtMatrixLayoutDestroy>>;
using Preference =
    std::unique_ptr<cublasLtMatmulPreferenceOpaque_t, LtDeleter<cublasLtMatmulPreference_t, cublasLtMatmulPreferenceDestroy>>;

// A column-major matrix of rows × cols with leading dimension ld, as cuBLASLt describes one.
Layout make_layout(cudaDataType_t type, int64_t rows, int64_t cols, int64_t ld) {
  cublasLtMatrixLayout_t layout = nullptr;
  TESSERA_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&layout, type, static_cast<uint64_t>(rows),
                                                  static_cast<uint64_t>(cols), ld));
  return Layout(layout);
}

void check_operand(const char* name, const DeviceBuffer& buffer, int64_t rows, int64_t cols, size_t element_size,
                   GemmPrecision precision) {
  const size_t needed = static_cast<size_t>(rows) * static_cast<size_t>(cols) * element_size;
  TESSERA_CHECK(buffer.bytes() >= needed, "[cuda::gemm] ", name, " (", rows, ", ", cols, ") in ",
                gemm_precision_name(precision), " needs ", needed, " bytes; its buffer holds ", buffer.bytes());
}

}  // namespace


void gemm(GemmPrecision precision, const DeviceBuffer& a, const DeviceBuffer& b, DeviceBuffer& c, int64_t m, int64_t n,
          int64_t k) {
  TESSERA_CHECK(m >= 0 && n >= 0 && k >= 0, "[cuda::gemm] negative shape: m ", m, ", n ", n, ", k ", k);
  TESSERA_CHECK(a.device() == c.device() && b.device() == c.device(), "[cuda::gemm] A, B and C must be on one device: cuda:",
                a.device(), ", cuda:", b.device(), ", cuda:", c.device());
  const size_t in_size = gemm_input_element_size(precision);
  check_operand("A", a, m, k, in_size, precision);
  check_operand("B", b, k, n, in_size, precision);
  check_operand("C", c, m, n, sizeof(float), precision);
  if (m == 0 || n == 0) return;
  const int device = c.device();
  detail::use_device(device, "cuda::gemm");
  if (k == 0) {  // an empty sum: C is zero, as cpu::gemm writes it
    TESSERA_CUDA_CHECK(cudaMemset(c.data(), 0, static_cast<size_t>(m) * n * sizeof(float)));
    return;
  }
  LtContext& context = lt_context(device);

  const cublasComputeType_t compute =
      precision == GemmPrecision::kTensorFloat32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  const cudaDataType_t in_type = precision == GemmPrecision::kBFloat16 ? CUDA_R_16BF : CUDA_R_32F;
  cublasLtMatmulDesc_t raw_desc = nullptr;
  TESSERA_CUBLAS_CHECK(cublasLtMatmulDescCreate(&raw_desc, compute, CUDA_R_32F));
  MatmulDesc desc(raw_desc);

  // Row-major C (m, n) = A (m, k) B (k, n) is column-major Cᵀ (n, m) = Bᵀ (n, k) Aᵀ (k, m), and a
  // row-major matrix read column-major is its transpose: so B goes first, and nothing is copied.
  Layout b_layout = make_layout(in_type, n, k, n);
  Layout a_layout = make_layout(in_type, k, m, k);
  Layout c_layout = make_layout(CUDA_R_32F, n, m, n);

  cublasLtMatmulPreference_t raw_preference = nullptr;
  TESSERA_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&raw_preference));
  Preference preference(raw_preference);
  const size_t workspace_bytes = context.workspace.bytes();
  TESSERA_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(preference.get(), CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                            &workspace_bytes, sizeof(workspace_bytes)));
  cublasLtMatmulHeuristicResult_t heuristic{};
  int found = 0;
  TESSERA_CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(context.handle, desc.get(), b_layout.get(), a_layout.get(),
                                                      c_layout.get(), c_layout.get(), preference.get(), 1, &heuristic,
                                                      &found));
  if (found == 0)
    throw NotSupportedError(tessera::detail::concat("[cuda::gemm] cuBLASLt has no kernel for ", gemm_precision_name(precision),
                                                    " (", m, ", ", k, ") x (", k, ", ", n, ") on cuda:", device));
  const float alpha = 1.0f, beta = 0.0f;
  TESSERA_CUBLAS_CHECK(cublasLtMatmul(context.handle, desc.get(), &alpha, b.data(), b_layout.get(), a.data(),
                                      a_layout.get(), &beta, c.data(), c_layout.get(), c.data(), c_layout.get(),
                                      &heuristic.algo, context.workspace.data(), workspace_bytes, /*stream=*/nullptr));
}

}  // namespace tessera::cuda
