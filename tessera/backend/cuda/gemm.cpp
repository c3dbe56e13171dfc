#include "tessera/backend/cuda/gemm.h"

#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <utility>

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

cudaDataType_t input_type(GemmPrecision precision) {
  switch (precision) {
    case GemmPrecision::kBFloat16: return CUDA_R_16BF;
    case GemmPrecision::kFloat16: return CUDA_R_16F;
    default: return CUDA_R_32F;
  }
}

// The largest power of two (at most 256) dividing a pointer's address: cuBLASLt's heuristic assumes
// 256-byte aligned operands unless told, and a kernel it picks on that assumption reads a view's
// offset pointer wrongly (PyTorch tells it the same way).
uint32_t alignment_of(const void* p) {
  const auto address = reinterpret_cast<uintptr_t>(p);
  uint32_t alignment = 256;
  while (alignment > 1 && address % alignment != 0) alignment /= 2;
  return alignment;
}

// An operand's alignment as every item and row of it has it: its base pointer's, lowered to what its
// leading dimension and batch step (in bytes) keep.
uint32_t operand_alignment(const GemmOperand& op, size_t element_size) {
  uint32_t alignment = alignment_of(op.data);
  for (int64_t step : {op.ld, op.batch_step}) {
    const auto bytes = static_cast<uint64_t>(step) * element_size;
    while (bytes != 0 && alignment > 1 && bytes % alignment != 0) alignment /= 2;
  }
  return alignment;
}

// Everything that decides which algorithm fits: the heuristic is asked once per distinct key.
struct ProblemKey {
  int device;
  GemmPrecision precision;
  bool a_column_major, b_column_major, bias;
  int64_t m, n, k, lda, ldb, batch, a_step, b_step;
  uint32_t a_align, b_align, c_align, bias_align;  // the heuristic reads the bias pointer's alignment too
  auto tie() const {
    return std::tie(device, precision, a_column_major, b_column_major, bias, m, n, k, lda, ldb, batch, a_step, b_step,
                    a_align, b_align, c_align, bias_align);
  }
  bool operator<(const ProblemKey& other) const { return tie() < other.tie(); }
};

void set_layout_batch(const Layout& layout, int64_t batch, int64_t step) {
  if (batch <= 1) return;
  const int32_t count = static_cast<int32_t>(batch);
  TESSERA_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(layout.get(), CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count,
                                                        sizeof(count)));
  TESSERA_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(layout.get(), CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                                        &step, sizeof(step)));
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
  // (Empty shapes, and k = 0's zeros, as gemm_batched writes them.)
  const GemmOperand a_op{a.data(), m, k, k, false, 0}, b_op{b.data(), k, n, n, false, 0};
  gemm_batched(c.device(), precision, a_op, b_op, static_cast<float*>(c.data()), 1, nullptr);
}

void gemm_batched(int device, GemmPrecision precision, const GemmOperand& a, const GemmOperand& b, float* c,
                  int64_t batch, const float* bias) {
  const int64_t n = a.rows, k = a.cols, m = b.cols;
  TESSERA_CHECK(b.rows == k, "[cuda::gemm_batched] inner dims differ: (", n, ", ", k, ") x (", b.rows, ", ", m, ")");
  if (batch == 0 || n == 0 || m == 0) return;
  detail::use_device(device, "cuda::gemm_batched");
  if (k == 0) {  // an empty sum: C is the bias, or zero, as the CPU writes it
    TESSERA_CHECK(bias == nullptr, "[cuda::gemm_batched] a bias with k = 0 is not supported");
    TESSERA_CUDA_CHECK(cudaMemsetAsync(c, 0, static_cast<size_t>(batch * n * m) * sizeof(float), nullptr));
    return;
  }
  LtContext& context = lt_context(device);
  const cublasComputeType_t compute =
      precision == GemmPrecision::kTensorFloat32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  const cudaDataType_t in_type = input_type(precision);
  cublasLtMatmulDesc_t raw_desc = nullptr;
  TESSERA_CUBLAS_CHECK(cublasLtMatmulDescCreate(&raw_desc, compute, CUDA_R_32F));
  MatmulDesc desc(raw_desc);

  // Row-major C (n, m) = A (n, k) B (k, m) is column-major Cᵀ (m, n) = Bᵀ (m, k) Aᵀ (k, n), and a
  // row-major matrix read column-major is its transpose: so B goes first as cuBLASLt's A, untransposed
  // where it is row-major; a column-major (transposed) operand is the same memory with op T.
  const cublasOperation_t op_b = b.column_major ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_a = a.column_major ? CUBLAS_OP_T : CUBLAS_OP_N;
  TESSERA_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc.get(), CUBLASLT_MATMUL_DESC_TRANSA, &op_b, sizeof(op_b)));
  TESSERA_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc.get(), CUBLASLT_MATMUL_DESC_TRANSB, &op_a, sizeof(op_a)));
  if (bias != nullptr) {
    // The bias runs along D's rows, which are C's columns here: one value per output feature.
    const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
    TESSERA_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(desc.get(), CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)));
    TESSERA_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc.get(), CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
  }
  // Stored shapes: row-major (r, c) is column-major (c, r) with the same ld; column-major (r, c) is itself.
  Layout b_layout = b.column_major ? make_layout(in_type, k, m, b.ld) : make_layout(in_type, m, k, b.ld);
  Layout a_layout = a.column_major ? make_layout(in_type, n, k, a.ld) : make_layout(in_type, k, n, a.ld);
  Layout c_layout = make_layout(CUDA_R_32F, m, n, m);
  set_layout_batch(b_layout, batch, b.batch_step);
  set_layout_batch(a_layout, batch, a.batch_step);
  set_layout_batch(c_layout, batch, n * m);

  const size_t in_size = gemm_input_element_size(precision);
  const ProblemKey key{device, precision, a.column_major, b.column_major, bias != nullptr, m, n, k, a.ld, b.ld,
                       batch, a.batch_step, b.batch_step, operand_alignment(a, in_size), operand_alignment(b, in_size),
                       alignment_of(c), bias != nullptr ? alignment_of(bias) : 0u};
  cublasLtMatmulAlgo_t algo{};
  {
    static std::mutex mutex;
    static auto* chosen = new std::map<ProblemKey, cublasLtMatmulAlgo_t>();
    std::lock_guard lock(mutex);
    auto it = chosen->find(key);
    if (it != chosen->end()) {
      algo = it->second;
    } else {
      cublasLtMatmulPreference_t raw_preference = nullptr;
      TESSERA_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&raw_preference));
      Preference preference(raw_preference);
      const size_t workspace_bytes = context.workspace.bytes();
      TESSERA_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
          preference.get(), CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_bytes, sizeof(workspace_bytes)));
      // cuBLASLt's A is our B, its B our A.
      for (auto [attribute, value] : {std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, key.b_align},
                                      std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, key.a_align},
                                      std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, key.c_align},
                                      std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, key.c_align}})
        TESSERA_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(preference.get(), attribute, &value, sizeof(value)));
      cublasLtMatmulHeuristicResult_t heuristic{};
      int found = 0;
      TESSERA_CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(context.handle, desc.get(), b_layout.get(), a_layout.get(),
                                                          c_layout.get(), c_layout.get(), preference.get(), 1,
                                                          &heuristic, &found));
      if (found == 0)
        throw NotSupportedError(tessera::detail::concat("[cuda::gemm_batched] cuBLASLt has no kernel for ",
                                                        gemm_precision_name(precision), " ", batch, " x (", n, ", ", k,
                                                        ") x (", k, ", ", m, ") on cuda:", device));
      algo = heuristic.algo;
      chosen->emplace(key, algo);
    }
  }
  const float alpha = 1.0f, beta = 0.0f;
  TESSERA_CUBLAS_CHECK(cublasLtMatmul(context.handle, desc.get(), &alpha, b.data, b_layout.get(), a.data,
                                      a_layout.get(), &beta, c, c_layout.get(), c, c_layout.get(), &algo,
                                      context.workspace.data(), context.workspace.bytes(), /*stream=*/nullptr));
}

}  // namespace tessera::cuda
