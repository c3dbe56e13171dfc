// conv2d's forward and its two backward products on cuDNN (conv.h), through cuDNN's convolution
// API of descriptors and algorithms: cuDNN 9 keeps it beside its graph API, and it covers every
// convolution tessera has (groups, strides, padding, dilation) in float32, bf16 and fp16. The graph
// API, with fused bias and activation, is the next step for speed.
//
// Each call describes its tensors, asks cuDNN's heuristic for the shape's algorithms once (then
// remembers the choice), takes the first deterministic one that is allowed (float32: FMA math only,
// as the CPU's products, unless train.allow_tf32 lets TF32 tensor cores in), and runs it on the device's compute stream with a workspace
// from the tensor allocator (freed at once: later work on the stream is ordered after this).
#include <cudnn.h>

#include <map>
#include <mutex>
#include <tuple>
#include <vector>

#include "tessera/backend/cuda/allocator.h"
#include "tessera/backend/cuda/conv.h"
#include "tessera/backend/cuda/cuda_check.h"

namespace tessera::cuda {
namespace {

[[noreturn]] void throw_cudnn_error(const char* call, cudnnStatus_t status, const char* file, int line) {
  std::string message = tessera::detail::concat("[cudnn] ", call, " failed at ", file, ":", line, ": ",
                                                cudnnGetErrorString(status));
  if (status == CUDNN_STATUS_ALLOC_FAILED) throw OutOfMemoryError(message);
  if (status == CUDNN_STATUS_NOT_SUPPORTED || status == CUDNN_STATUS_ARCH_MISMATCH) throw NotSupportedError(message);
  throw Error(message);
}

#define TESSERA_CUDNN_CHECK(call)                                             \
  do {                                                                        \
    const cudnnStatus_t tessera_cudnn_status_ = (call);                       \
    if (tessera_cudnn_status_ != CUDNN_STATUS_SUCCESS)                        \
      throw_cudnn_error(#call, tessera_cudnn_status_, __FILE__, __LINE__);    \
  } while (0)

// One handle per device, made on first use and never destroyed (as gemm.cpp's cuBLASLt handles:
// at process exit the runtime may be gone before a destructor runs). Its stream is the legacy
// default stream, the device's compute stream.
cudnnHandle_t handle_for(int device) {
  static std::mutex mutex;
  static auto* handles = new std::map<int, cudnnHandle_t>();
  std::lock_guard lock(mutex);
  cudnnHandle_t& handle = (*handles)[device];
  if (handle == nullptr) TESSERA_CUDNN_CHECK(cudnnCreate(&handle));
  return handle;
}

cudnnDataType_t cudnn_type(ElementType type) {
  switch (type) {
    case ElementType::kFloat32: return CUDNN_DATA_FLOAT;
    case ElementType::kBFloat16: return CUDNN_DATA_BFLOAT16;
    case ElementType::kFloat16: return CUDNN_DATA_HALF;
    case ElementType::kInt64: break;
  }
  throw ValueError("[cuda::conv2d] convolution takes float32, bfloat16 or float16 tensors, not int64");
}

int as_int(int64_t v, const char* what) {
  TESSERA_CHECK(v >= 0 && v <= 2147483647, "[cuda::conv2d] ", what, " ", v, " exceeds cuDNN's int range");
  return static_cast<int>(v);
}

// The four descriptors of one convolution, destroyed with it.
struct Descriptors {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;

  Descriptors(ElementType type, const ConvGeometry& g) {
    const cudnnDataType_t dt = cudnn_type(type);
    TESSERA_CUDNN_CHECK(cudnnCreateTensorDescriptor(&x));
    TESSERA_CUDNN_CHECK(cudnnCreateTensorDescriptor(&y));
    TESSERA_CUDNN_CHECK(cudnnCreateFilterDescriptor(&w));
    TESSERA_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&conv));
    TESSERA_CUDNN_CHECK(cudnnSetTensor4dDescriptor(x, CUDNN_TENSOR_NCHW, dt, as_int(g.N, "N"), as_int(g.C, "C"),
                                                   as_int(g.H, "H"), as_int(g.W, "W")));
    TESSERA_CUDNN_CHECK(cudnnSetTensor4dDescriptor(y, CUDNN_TENSOR_NCHW, dt, as_int(g.N, "N"), as_int(g.OC, "OC"),
                                                   as_int(g.OH, "OH"), as_int(g.OW, "OW")));
    TESSERA_CUDNN_CHECK(cudnnSetFilter4dDescriptor(w, dt, CUDNN_TENSOR_NCHW, as_int(g.OC, "OC"),
                                                   as_int(g.C / g.groups, "C / groups"), as_int(g.KH, "KH"),
                                                   as_int(g.KW, "KW")));
    TESSERA_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(conv, as_int(g.pad_h, "pad"), as_int(g.pad_w, "pad"),
                                                        as_int(g.stride_h, "stride"), as_int(g.stride_w, "stride"),
                                                        as_int(g.dilation_h, "dilation"),
                                                        as_int(g.dilation_w, "dilation"), CUDNN_CROSS_CORRELATION,
                                                        CUDNN_DATA_FLOAT));
    TESSERA_CUDNN_CHECK(cudnnSetConvolutionGroupCount(conv, as_int(g.groups, "groups")));
  }
  ~Descriptors() {
    cudnnDestroyConvolutionDescriptor(conv);
    cudnnDestroyFilterDescriptor(w);
    cudnnDestroyTensorDescriptor(y);
    cudnnDestroyTensorDescriptor(x);
  }
  Descriptors(const Descriptors&) = delete;
  Descriptors& operator=(const Descriptors&) = delete;
};

enum class Pass { kForward, kBackwardData, kBackwardFilter };

// What a shape's convolution runs with.
struct Choice {
  int algorithm = 0;
  cudnnMathType_t math = CUDNN_FMA_MATH;
  size_t workspace = 0;
};

struct ShapeKey {
  int device;
  Pass pass;
  ElementType type;
  bool tf32;
  ConvGeometry g;
  auto tie() const {
    return std::tie(device, pass, type, tf32, g.N, g.C, g.H, g.W, g.OC, g.KH, g.KW, g.OH, g.OW, g.stride_h, g.stride_w,
                    g.pad_h, g.pad_w, g.dilation_h, g.dilation_w, g.groups);
  }
  bool operator<(const ShapeKey& other) const { return tie() < other.tie(); }
};

// The first of the heuristic's results (best first) that ran, is deterministic and uses an allowed
// math: float32 on FMA only (TF32 would round the operands to 10-bit mantissas), the half types on
// tensor cores or FMA.
template <typename Perf>
Choice first_allowed(const std::vector<Perf>& results, int returned, ElementType type, bool tf32, const char* pass) {
  for (int i = 0; i < returned; ++i) {
    const Perf& r = results[static_cast<size_t>(i)];
    if (r.status != CUDNN_STATUS_SUCCESS || r.determinism != CUDNN_DETERMINISTIC) continue;
    if (type == ElementType::kFloat32 && !tf32 && r.mathType != CUDNN_FMA_MATH && r.mathType != CUDNN_DEFAULT_MATH) continue;
    Choice c;
    c.algorithm = static_cast<int>(r.algo);
    c.math = type == ElementType::kFloat32 && !tf32 ? CUDNN_FMA_MATH : r.mathType;
    c.workspace = r.memory;
    return c;
  }
  throw NotSupportedError(tessera::detail::concat("[cuda::conv2d] cuDNN has no deterministic ", pass,
                                                  " algorithm for this convolution"));
}

// One pass's choice: the heuristic's results (find), the first allowed, and its workspace under the
// math it runs with (workspace), which may differ from the math the heuristic was asked under.
template <typename Perf, typename Find, typename WorkspaceSize>
Choice pick(const Descriptors& d, const ShapeKey& key, int count, const char* pass, Find find,
            WorkspaceSize workspace_size) {
  std::vector<Perf> results(static_cast<size_t>(count));
  int returned = 0;
  find(count, &returned, results.data());
  Choice c = first_allowed(results, returned, key.type, key.tf32, pass);
  TESSERA_CUDNN_CHECK(cudnnSetConvolutionMathType(d.conv, c.math));
  workspace_size(c.algorithm, &c.workspace);
  return c;
}

Choice choose(cudnnHandle_t handle, const Descriptors& d, const ShapeKey& key) {
  static std::mutex mutex;
  static auto* chosen = new std::map<ShapeKey, Choice>();
  std::lock_guard lock(mutex);
  auto it = chosen->find(key);
  if (it != chosen->end()) return it->second;
  // The heuristic is asked under the math type the run will use, so that its results fit it.
  // (float32 with TF32 allowed: cuDNN's default math, which takes TF32 tensor cores where they help.)
  TESSERA_CUDNN_CHECK(cudnnSetConvolutionMathType(
      d.conv, key.type != ElementType::kFloat32 ? CUDNN_TENSOR_OP_MATH : key.tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH));
  Choice c;
  switch (key.pass) {
    case Pass::kForward:
      c = pick<cudnnConvolutionFwdAlgoPerf_t>(
          d, key, CUDNN_CONVOLUTION_FWD_ALGO_COUNT, "forward",
          [&](int count, int* returned, cudnnConvolutionFwdAlgoPerf_t* results) {
            TESSERA_CUDNN_CHECK(
                cudnnGetConvolutionForwardAlgorithm_v7(handle, d.x, d.w, d.conv, d.y, count, returned, results));
          },
          [&](int algorithm, size_t* bytes) {
            TESSERA_CUDNN_CHECK(cudnnGetConvolutionForwardWorkspaceSize(
                handle, d.x, d.w, d.conv, d.y, static_cast<cudnnConvolutionFwdAlgo_t>(algorithm), bytes));
          });
      break;
    case Pass::kBackwardData:
      c = pick<cudnnConvolutionBwdDataAlgoPerf_t>(
          d, key, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, "backward-data",
          [&](int count, int* returned, cudnnConvolutionBwdDataAlgoPerf_t* results) {
            TESSERA_CUDNN_CHECK(
                cudnnGetConvolutionBackwardDataAlgorithm_v7(handle, d.w, d.y, d.conv, d.x, count, returned, results));
          },
          [&](int algorithm, size_t* bytes) {
            TESSERA_CUDNN_CHECK(cudnnGetConvolutionBackwardDataWorkspaceSize(
                handle, d.w, d.y, d.conv, d.x, static_cast<cudnnConvolutionBwdDataAlgo_t>(algorithm), bytes));
          });
      break;
    case Pass::kBackwardFilter:
      c = pick<cudnnConvolutionBwdFilterAlgoPerf_t>(
          d, key, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, "backward-filter",
          [&](int count, int* returned, cudnnConvolutionBwdFilterAlgoPerf_t* results) {
            TESSERA_CUDNN_CHECK(
                cudnnGetConvolutionBackwardFilterAlgorithm_v7(handle, d.x, d.y, d.conv, d.w, count, returned, results));
          },
          [&](int algorithm, size_t* bytes) {
            TESSERA_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterWorkspaceSize(
                handle, d.x, d.y, d.conv, d.w, static_cast<cudnnConvolutionBwdFilterAlgo_t>(algorithm), bytes));
          });
      break;
  }
  chosen->emplace(key, c);
  return c;
}

// Device memory for one call's workspace, from the tensor allocator.
class Workspace {
 public:
  Workspace(int device, size_t bytes) : device_(cuda_device(device)), bytes_(bytes) {
    if (bytes_ > 0) data_ = tensor_allocator().allocate(bytes_, device_);
  }
  ~Workspace() {
    if (data_ != nullptr) tensor_allocator().deallocate(data_, bytes_, device_);
  }
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;
  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }

 private:
  Device device_;
  size_t bytes_;
  void* data_ = nullptr;
};

// What every pass does first: the device, the handle, the descriptors and the shape's choice.
struct Prepared {
  cudnnHandle_t handle;
  Descriptors d;
  Choice choice;
  Prepared(int device, ElementType type, const ConvGeometry& g, Pass pass, bool tf32, const char* op)
      : handle((detail::use_device(device, op), handle_for(device))), d(type, g),
        choice(choose(handle, d, ShapeKey{device, pass, type, type == ElementType::kFloat32 && tf32, g})) {
    TESSERA_CUDNN_CHECK(cudnnSetConvolutionMathType(d.conv, choice.math));
  }
};

bool empty(const ConvGeometry& g) { return g.N == 0 || g.OC == 0 || g.C == 0; }

}  // namespace

void conv2d_forward(int device, ElementType type, const ConvGeometry& g, const void* x, const void* w, void* y,
                    bool tf32) {
  if (g.N == 0 || g.OC == 0) return;
  Prepared p(device, type, g, Pass::kForward, tf32, "cuda::conv2d_forward");
  Workspace workspace(device, p.choice.workspace);
  const float one = 1.0f, zero = 0.0f;
  TESSERA_CUDNN_CHECK(cudnnConvolutionForward(p.handle, &one, p.d.x, x, p.d.w, w, p.d.conv,
                                              static_cast<cudnnConvolutionFwdAlgo_t>(p.choice.algorithm),
                                              workspace.data(), workspace.bytes(), &zero, p.d.y, y));
}

void conv2d_backward_data(int device, ElementType type, const ConvGeometry& g, const void* dy, const void* w, void* dx,
                          bool tf32) {
  if (empty(g)) return;
  Prepared p(device, type, g, Pass::kBackwardData, tf32, "cuda::conv2d_backward_data");
  Workspace workspace(device, p.choice.workspace);
  const float one = 1.0f, zero = 0.0f;
  TESSERA_CUDNN_CHECK(cudnnConvolutionBackwardData(p.handle, &one, p.d.w, w, p.d.y, dy, p.d.conv,
                                                   static_cast<cudnnConvolutionBwdDataAlgo_t>(p.choice.algorithm),
                                                   workspace.data(), workspace.bytes(), &zero, p.d.x, dx));
}

void conv2d_backward_filter(int device, ElementType type, const ConvGeometry& g, const void* x, const void* dy,
                            void* dw, bool tf32) {
  if (empty(g)) return;
  Prepared p(device, type, g, Pass::kBackwardFilter, tf32, "cuda::conv2d_backward_filter");
  Workspace workspace(device, p.choice.workspace);
  const float one = 1.0f, zero = 0.0f;
  TESSERA_CUDNN_CHECK(cudnnConvolutionBackwardFilter(p.handle, &one, p.d.x, x, p.d.y, dy, p.d.conv,
                                                     static_cast<cudnnConvolutionBwdFilterAlgo_t>(p.choice.algorithm),
                                                     workspace.data(), workspace.bytes(), &zero, p.d.w, dw));
}

}  // namespace tessera::cuda
