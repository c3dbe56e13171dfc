// "powersgd": low-rank gradient compression with error feedback (Vogels, Karimireddy and Jaggi,
// "PowerSGD: Practical Low-Rank Gradient Compression for Distributed Optimization", NeurIPS 2019),
// following PyTorch's powerSGD_hook.
//
// Each parameter of >= 2 dims is viewed as a matrix (n, m) = (shape[0], prod(rest)); one whose
// min(n, m) <= r gains nothing from rank r and travels uncompressed, with the 1-D parameters, in
// one float32 all-reduce per bucket. For every other matrix, per bucket and iteration:
//   M = grad + error                 error: what earlier compressions left out (error feedback)
//   P = M Q                          Q (m, r) warm-started from the previous iteration
//   all-reduce P / divisor           all P's of the bucket in one all-reduce
//   orthonormalise P's columns       Gram-Schmidt, twice; an exactly dependent column is zeroed
//   Q = Mᵀ P; all-reduce Q / divisor all Q's in one all-reduce; kept as the next warm start
//   approx = P Qᵀ = P Pᵀ avg(M)      written into the bucket, identical on every rank
//   error = M - approx               local
// Payload per bucket: 4·r·Σ(n + m) bytes for the matrices instead of 4·Σ n·m, plus 4 bytes per
// uncompressed element.
//
// The first start_iter iterations are plain all-reduces (PyTorch's start_powerSGD_iter, whose
// documentation explains why: early training is sensitive to inaccurate gradients). Q starts
// as orthonormalised Gaussian noise from a generator seeded from (seed, bucket, matrix), so every
// rank starts from the same Q without communicating.
//
// A zeroed P column (say the gradient was all zero for a step) would make its Q column zero, and
// a warm-started Q column that is zero stays zero forever, so that direction would never be sent
// again; such Q columns are redrawn from a generator seeded from (seed, bucket, matrix,
// iteration), the same on every rank.
//
// State (error, Q) is kept per bucket index and parameter. The reducer rebuilds its buckets once,
// after the first iteration; a bucket whose shapes or offsets change gets fresh state (zero
// error), which with start_iter >= 2 happens before any compression.
#pragma once
#include <map>
#include <utility>
#include <vector>

#include "tessera/parallel/ddp/comm_hook.h"

namespace tessera::parallel::ddp {

class PowerSgdHook : public CommHook {
 public:
  PowerSgdHook(int rank, int64_t start_iter, uint64_t seed);
  std::string name() const override { return "powersgd"; }
  void start(dist::ProcessGroup& group, const BucketView& bucket) override;
  void finish(dist::ProcessGroup& group, const BucketView& bucket) override;

 private:
  struct Matrix {  // one compressed parameter
    int64_t offset = 0, rows = 0, cols = 0;
    Tensor q;             // (cols, r): the averaged Q of the last iteration
    Tensor error;         // (rows, cols)
    Tensor m;             // (rows, cols): this iteration's grad + error, between start and finish
    int64_t ordinal = 0;  // among the bucket's matrices, for the generator seeds
  };
  struct BucketState {
    std::vector<Shape> shapes;  // the layout this state belongs to
    std::vector<int64_t> offsets;
    std::vector<Matrix> matrices;
    std::vector<std::pair<int64_t, int64_t>> plain;  // (offset, numel) of uncompressed parameters
    int64_t plain_numel = 0, p_numel = 0, q_numel = 0;
    // This iteration's collectives.
    bool started = false, compressing = false;
    Tensor plain_values, ps;  // plain_numel; p_numel = Σ rows·r, each P (rows, r) back to back
    dist::WorkPtr plain_work, p_work;
  };
  BucketState& state_for(const BucketView& bucket);
  uint64_t seed_for(int bucket, int64_t ordinal, int64_t iteration) const;

  int rank_;
  int64_t start_iter_;
  uint64_t seed_;
  int64_t iteration_ = -1;  // the reducer starts buckets in index order: bucket 0 opens an iteration
  std::map<int, BucketState> buckets_;
};

// Orthonormalises the columns of the row-major (rows, cols) matrix `a` in place (modified
// Gram-Schmidt, two passes so float32 columns come out orthogonal to ~1e-7, sums in double).
// A column that cancels exactly (zero, or a copy of earlier ones), or is not finite, is set to
// zero rather than divided by ~0; the result says which. PyTorch's version divides by the norm
// plus an epsilon instead.
std::vector<bool> orthonormalize_columns(float* a, int64_t rows, int64_t cols);

}  // namespace tessera::parallel::ddp
