// Data-parallel k-means (Lloyd's algorithm), Spark MLlib's and Dask-ML's job: each rank holds its
// own points (its partitions of the table); per iteration it assigns them to the nearest centroid
// and sums them per centroid, and ONE all-reduce of (sums, counts, inertia) gives every rank the
// same new centroids. N ranks follow one process on all the points (up to summation order).
#pragma once
#include <cstdint>

#include "tessera/core/tensor.h"
#include "tessera/dist/process_group.h"

namespace tessera::parallel {

struct KMeansOptions {
  int64_t max_iterations = 300;  // scikit-learn's default
  // Stop once the centroids move less than this in total (sum of squared shifts), after scaling by
  // the points' mean per-feature variance, as scikit-learn's tol.
  double tolerance = 1e-4;
};

struct KMeansResult {
  Tensor centroids;      // (k, F)
  int64_t iterations = 0;
  double inertia = 0;    // sum over all ranks' points of the squared distance to their centroid
  bool converged = false;
};

// points (n, F) float32 of this rank (n may be 0 or differ by rank); initial (k, F), the same on
// every rank (scikit-learn's init=array, n_init=1). A cluster left empty keeps its centroid
// (scikit-learn would move it to a far point). group nullptr: one process.
KMeansResult kmeans(const Tensor& points, const Tensor& initial, const KMeansOptions& options = {},
                    dist::ProcessGroup* group = nullptr);

// The index of each point's nearest centroid (ties: the lowest index), int64 (n).
Tensor nearest_centroid(const Tensor& points, const Tensor& centroids);

}  // namespace tessera::parallel
