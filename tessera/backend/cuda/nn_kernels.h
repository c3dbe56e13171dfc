// The CUDA backend's kernels for the kernel table's reductions, row kernels, normalisations, indexing
// and dropout's mask (ops/kernels.h; backend/cuda/cuda_kernels.cpp turns tensors into these
// arguments). Plain C++, as elementwise.h: compiled by nvcc's C++17 as well as by the library, and
// no_cuda.cpp's errors stand in for each function in a CPU-only build.
//
// Every call runs on the device's compute stream (its legacy default stream, stream.h) and returns
// once its kernels are issued, except where it says it waits: those read a result back to the host
// (an index error, a loss's count), as the CPU kernel they stand for returns it. Operands are
// contiguous float32 (int64 indices) unless said otherwise; each names the CPU kernel it must equal.
// Where a kernel needs device scratch, the table lends it (a tensor from the caching allocator) and
// the size is given here.
#pragma once
#include <cstddef>
#include <cstdint>

namespace tessera::cuda {

// ---- max over one dim (index.cu; cpu_reduce.cpp's max and max_backward) ----
// `in` seen as (outer, n, inner), n >= 1: values and indices (outer, inner) of the max over n. NaN
// wins (the first NaN), ties keep the first index.
void max_over_dim(int device, const float* in, int64_t outer, int64_t n, int64_t inner, float* values,
                  int64_t* indices);
// grad_in (outer, n, inner): grad (outer, inner) where the index points, 0 elsewhere.
void max_over_dim_backward(int device, const float* grad, const int64_t* indices, int64_t outer, int64_t n,
                           int64_t inner, float* grad_in);

// ---- attention's weights (rows.cu; cpu_rows.cpp's attention_weights) ----
// rows of Tk scores, row m a query m % Tq: softmax(scale · scores) over the keys it sees (all, or
// under `causal` j <= m % Tq + (Tk - Tq)), 0 at the others.
void attention_rows(int device, const float* scores, int64_t rows, int64_t Tq, int64_t Tk, float scale, bool causal,
                    float* out);
void attention_rows_backward(int device, const float* out, const float* grad, int64_t rows, int64_t Tq, int64_t Tk,
                             float scale, bool causal, float* grad_in);

// ---- cross-entropy (losses.cu; cpu_rows.cpp's cross_entropy) ----
// What the rows add up to, read back to the host: the sum of the loss terms of the targets not
// ignored (in double, as the CPU sums them), their count, and the first target out of [0, C)
// (position -1 where there is none) with its value, for the CPU's IndexError.
struct CrossEntropySummary {
  double total = 0.0;
  int64_t count = 0;
  int64_t bad_position = -1;
  int64_t bad_target = 0;
};
// Scratch: the summary, then one loss term per row.
constexpr size_t kCrossEntropySummaryBytes = 256;
inline size_t cross_entropy_scratch_bytes(int64_t rows) {
  return kCrossEntropySummaryBytes + sizeof(float) * static_cast<size_t>(rows);
}
// logits (N, C), targets (N): each row's log-sum-exp into lse (0 where the target is ignored or out
// of range), the mean loss into loss (one float on the device; NaN without a target). Waits: the
// summary comes back to the host.
CrossEntropySummary cross_entropy_rows(int device, const float* logits, const int64_t* targets, int64_t N, int64_t C,
                                       int64_t ignore_index, float label_smoothing, float* loss, float* lse,
                                       void* scratch);
// grad_in (N, C) = (softmax - smoothed one-hot) · grad / count, 0 on ignored rows; grad is the loss's
// gradient, one float on the device.
void cross_entropy_rows_backward(int device, const float* logits, const int64_t* targets, const float* lse,
                                 const float* grad, int64_t N, int64_t C, int64_t ignore_index, float label_smoothing,
                                 int64_t count, float* grad_in);

// ---- layer and batch normalisation (norms.cu; cpu_rows.cpp's layer_norm, batch_norm) ----
// x (rows, D); weight and bias (D) or null; stats (rows, 2): each row's mean and 1/std.
void layer_norm_rows(int device, const float* x, const float* weight, const float* bias, int64_t rows, int64_t D,
                     float eps, float* out, float* stats);
// The weight's and bias's gradients are sums over the rows: each column summed over chunks of rows in
// row order, then over the chunks in order (no atomics: the same bits on every run). Scratch: the
// chunks' partial sums, 2 · chunks · D floats.
inline int64_t layer_norm_row_chunks(int64_t rows) {
  const int64_t per_chunk = rows / 256 + 32;  // at most 256 chunks, each of at least 32 rows
  return rows == 0 ? 1 : (rows + per_chunk - 1) / per_chunk;
}
// grad_x (rows, D); grad_weight and grad_bias (D) where not null.
void layer_norm_rows_backward(int device, const float* x, const float* weight, const float* stats, const float* grad,
                              int64_t rows, int64_t D, float* grad_x, float* grad_weight, float* grad_bias,
                              float* partial);
// x (N, C, S); running_mean / running_var: C floats `stride` apart, or null (training without them);
// weight and bias (C) or null; stats (C, 2): each channel's mean and 1/std.
void batch_norm_channels(int device, const float* x, int64_t N, int64_t C, int64_t S, float* running_mean,
                         int64_t mean_stride, float* running_var, int64_t var_stride, const float* weight,
                         const float* bias, bool training, float momentum, float eps, float* out, float* stats);
// grad_weight and grad_bias (C) are always computed (the input's gradient in training needs them).
void batch_norm_channels_backward(int device, const float* x, const float* weight, const float* stats,
                                  const float* grad, int64_t N, int64_t C, int64_t S, bool training, float* grad_x,
                                  float* grad_weight, float* grad_bias);

// ---- indexing (index.cu; cpu_index.cpp) ----
// The first of n indices outside [0, bound) and its value; position -1 where all are inside. Waits:
// the answer comes back to the host. Scratch: kIndexCheckScratchBytes.
struct IndexCheck {
  int64_t position = -1;
  int64_t value = 0;
};
constexpr size_t kIndexCheckScratchBytes = 2 * sizeof(int64_t);
IndexCheck check_indices(int device, const int64_t* indices, int64_t n, int64_t bound, void* scratch);
// out (outer, k, inner) = src (outer, n, inner) at the k indices along the middle dim (embedding is
// outer 1, index_select any), indices already checked.
void gather_rows(int device, const float* src, const int64_t* indices, int64_t outer, int64_t n, int64_t inner,
                 int64_t k, float* out);
// Its backward: grad_in (outer, n, inner) = 0, then grad (outer, k, inner) added at the indices.
// Deterministic and equal to the CPU's bits: the indices are sorted stably with their positions
// (cub::DeviceRadixSort), and each destination row sums its sources in position order, as the CPU's
// loop does. The scratch holds the sort's arrays and cub's temporary storage.
size_t scatter_add_scratch_bytes(int device, int64_t k, int64_t n);
void scatter_add_rows(int device, const float* grad, const int64_t* indices, int64_t outer, int64_t n, int64_t inner,
                      int64_t k, float* grad_in, void* scratch);

// ---- dropout's mask (index.cu) ----
// n floats, each keep_scale with probability 1 - p, else 0: element i keeps where the uniform float
// drawn from splitmix64's output i for `seed` is >= p. A counter-based stream, so any element is
// computed on its own; not the CPU's mask (which draws from mt19937_64 in element order).
void dropout_mask(int device, float* mask, int64_t n, float p, float keep_scale, uint64_t seed);

}  // namespace tessera::cuda
