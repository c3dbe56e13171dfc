// Cross-entropy on the device (nn_kernels.h; cpu_rows.cpp's cross_entropy and its backward).
//   forward: a block per row computes its log-sum-exp and its loss term (label smoothing included);
//            then one block adds the terms of the targets not ignored in double, counts them, finds
//            the first target out of range and writes the mean loss. The host reads those 32 bytes
//            back (the op needs the count, and an out-of-range target must throw the CPU's
//            IndexError): the one wait of the step's loss, as PyTorch's loss.item() is.
//   backward: a thread per logit, (softmax - smoothed one-hot) · g / count.
// The single finishing block reads N targets and N terms: at a training batch's N (tens of thousands
// of tokens) that is a few microseconds, and its sum has the same order on every run.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "tessera/backend/cuda/cuda_check.h"
#include "tessera/backend/cuda/launch.cuh"
#include "tessera/backend/cuda/nn_kernels.h"

namespace tessera::cuda {
namespace {

static_assert(sizeof(CrossEntropySummary) <= kCrossEntropySummaryBytes, "the scratch's summary slot is too small");

// Row i's log-sum-exp and loss term (1 - eps)(lse - x[t]) + eps (lse - mean x); both 0 where its
// target is ignored or out of range (the finishing block reports those). The early return is the
// block's (every thread reads the same target), so no thread is left waiting at a barrier.
__global__ void cross_entropy_kernel(const float* __restrict__ logits, const int64_t* __restrict__ targets,
                                     int64_t first_row, int64_t C, int64_t ignore_index, float eps,
                                     float* __restrict__ lse, float* __restrict__ terms) {
  __shared__ float scratch[kRowThreads];
  const int64_t i = first_row + blockIdx.x;
  const int64_t t = targets[i];
  if (t == ignore_index || t < 0 || t >= C) {
    if (threadIdx.x == 0) {
      lse[i] = 0.0f;
      terms[i] = 0.0f;
    }
    return;
  }
  const float* r = logits + i * C;
  // fmaxf skips a NaN, but the NaN's exponential then makes the sum NaN, as on the CPU; a row of
  // -inf gives exp(-inf - -inf) = NaN, as there.
  float mx = -INFINITY;
  for (int64_t c = threadIdx.x; c < C; c += kRowThreads) mx = fmaxf(mx, r[c]);
  mx = block_reduce(mx, scratch, Max{});
  float s = 0.0f, row_sum = 0.0f;
  for (int64_t c = threadIdx.x; c < C; c += kRowThreads) {
    s += expf(r[c] - mx);
    row_sum += r[c];
  }
  s = block_reduce(s, scratch, Add{});
  row_sum = block_reduce(row_sum, scratch, Add{});
  if (threadIdx.x == 0) {
    const float l = mx + logf(s);
    lse[i] = l;
    terms[i] = (1.0f - eps) * (l - r[t]) + eps * (l - row_sum / static_cast<float>(C));
  }
}

// One block: the total and count of the targets not ignored, the first out of range, and the loss.
__global__ void cross_entropy_total_kernel(const int64_t* __restrict__ targets, const float* __restrict__ terms,
                                           int64_t N, int64_t C, int64_t ignore_index,
                                           CrossEntropySummary* __restrict__ summary, float* __restrict__ loss) {
  __shared__ double sums[kRowThreads];
  __shared__ int64_t counts[kRowThreads];
  double total = 0.0;
  int64_t count = 0, bad = N;
  for (int64_t i = threadIdx.x; i < N; i += kRowThreads) {
    const int64_t t = targets[i];
    if (t == ignore_index) continue;
    ++count;
    total += terms[i];
    if ((t < 0 || t >= C) && bad == N) bad = i;  // a thread's positions ascend: its first is its least
  }
  total = block_reduce(total, sums, Add{});
  count = block_reduce(count, counts, Add{});
  bad = block_reduce(bad, counts, Min{});
  if (threadIdx.x == 0) {
    summary->total = total;
    summary->count = count;
    summary->bad_position = bad < N ? bad : -1;
    summary->bad_target = bad < N ? targets[bad] : 0;
    *loss = count ? static_cast<float>(total / static_cast<double>(count)) : NAN;
  }
}

__global__ void cross_entropy_backward_kernel(const float* __restrict__ logits, const int64_t* __restrict__ targets,
                                              const float* __restrict__ lse, const float* __restrict__ grad, int64_t N,
                                              int64_t C, int64_t ignore_index, float eps, int64_t count,
                                              float* __restrict__ grad_in) {
  const float scale = *grad / static_cast<float>(count);
  const float smooth = eps / static_cast<float>(C);
  const int64_t total = N * C;
  for (int64_t e = first_index(); e < total; e += grid_stride()) {
    const int64_t i = e / C, c = e - i * C, t = targets[i];
    if (t == ignore_index) {
      grad_in[e] = 0.0f;
      continue;
    }
    float d = (expf(logits[e] - lse[i]) - smooth) * scale;
    if (c == t) d -= (1.0f - eps) * scale;
    grad_in[e] = d;
  }
}

}  // namespace

CrossEntropySummary cross_entropy_rows(int device, const float* logits, const int64_t* targets, int64_t N, int64_t C,
                                       int64_t ignore_index, float label_smoothing, float* loss, float* lse,
                                       void* scratch) {
  detail::use_device(device, "cuda::cross_entropy_rows");
  auto* summary = static_cast<CrossEntropySummary*>(scratch);
  float* terms = reinterpret_cast<float*>(static_cast<char*>(scratch) + kCrossEntropySummaryBytes);
  for (int64_t r = 0; r < N; r += kMaxRowsPerLaunch) {
    const int64_t count = std::min(N - r, kMaxRowsPerLaunch);
    cross_entropy_kernel<<<static_cast<unsigned>(count), kRowThreads>>>(logits, targets, r, C, ignore_index,
                                                                        label_smoothing, lse, terms);
  }
  cross_entropy_total_kernel<<<1, kRowThreads>>>(targets, terms, N, C, ignore_index, summary, loss);
  TESSERA_CUDA_CHECK(cudaGetLastError());
  CrossEntropySummary host;
  TESSERA_CUDA_CHECK(cudaMemcpy(&host, summary, sizeof host, cudaMemcpyDeviceToHost));
  return host;
}

void cross_entropy_rows_backward(int device, const float* logits, const int64_t* targets, const float* lse,
                                 const float* grad, int64_t N, int64_t C, int64_t ignore_index, float label_smoothing,
                                 int64_t count, float* grad_in) {
  if (N * C == 0) return;
  detail::use_device(device, "cuda::cross_entropy_rows_backward");
  if (count == 0) {  // every target ignored: the CPU's zeros
    TESSERA_CUDA_CHECK(cudaMemsetAsync(grad_in, 0, sizeof(float) * static_cast<size_t>(N * C), nullptr));
    return;
  }
  cross_entropy_backward_kernel<<<blocks_for(N * C), kThreads>>>(logits, targets, lse, grad, N, C, ignore_index,
                                                                 label_smoothing, count, grad_in);
  TESSERA_CUDA_CHECK(cudaGetLastError());
}

}  // namespace tessera::cuda
