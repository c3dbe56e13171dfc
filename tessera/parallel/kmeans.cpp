#include "tessera/parallel/kmeans.h"

#include <vector>

#include "tessera/autograd/grad_mode.h"
#include "tessera/ops/ops.h"

namespace tessera::parallel {

namespace {

// Squared distances (n, k) as |x|² - 2 x·c + |c|², one sgemm.
Tensor squared_distances(const Tensor& x, const Tensor& c) {
  Tensor xx = sum(mul(x, x), {1}, true), cc = reshape(sum(mul(c, c), {1}), {1, c.shape()[0]});
  return add(sub(xx, mul(matmul(x, transpose(c, 0, 1)), 2.0f)), cc);
}

// In place, over the group when there is one.
void sum_over_ranks(std::vector<double>& values, dist::ProcessGroup* group) {
  if (group == nullptr || group->size() == 1) return;
  // float64 has no tensor dtype here: split each value into a float32 high part and the remainder,
  // so the sum keeps about 48 bits rather than float32's 24.
  std::vector<float> parts(values.size() * 2);
  for (size_t i = 0; i < values.size(); ++i) {
    parts[2 * i] = static_cast<float>(values[i]);
    parts[2 * i + 1] = static_cast<float>(values[i] - static_cast<double>(parts[2 * i]));
  }
  Tensor t = from_vector(parts, {static_cast<int64_t>(parts.size())});
  group->blocking_allreduce(t);
  const std::vector<float> summed = t.to_vector<float>();
  for (size_t i = 0; i < values.size(); ++i) values[i] = double(summed[2 * i]) + double(summed[2 * i + 1]);
}

}  // namespace

Tensor nearest_centroid(const Tensor& points, const Tensor& centroids) {
  TESSERA_CHECK(points.dim() == 2 && centroids.dim() == 2 && points.shape()[1] == centroids.shape()[1],
                "[kmeans] points (n, F) and centroids (k, F) must share F, got ", shape_str(points.shape()), " and ",
                shape_str(centroids.shape()));
  NoGradGuard no_grad;
  if (points.shape()[0] == 0) return zeros({0}, DType::Int64);
  return argmax(neg(squared_distances(points, centroids)), 1);
}

KMeansResult kmeans(const Tensor& points, const Tensor& initial, const KMeansOptions& o, dist::ProcessGroup* group) {
  TESSERA_CHECK(points.dtype() == DType::Float32 && initial.dtype() == DType::Float32, "[kmeans] needs float32 points");
  TESSERA_CHECK(initial.dim() == 2 && initial.shape()[0] >= 1, "[kmeans] initial centroids must be (k, F), got ",
                shape_str(initial.shape()));
  TESSERA_CHECK(points.dim() == 2 && points.shape()[1] == initial.shape()[1], "[kmeans] points (n, F) and centroids (k, F) "
                "must share F, got ", shape_str(points.shape()), " and ", shape_str(initial.shape()));
  TESSERA_CHECK(o.max_iterations >= 1 && o.tolerance >= 0, "[kmeans] max_iterations must be >= 1 and tolerance >= 0");
  NoGradGuard no_grad;
  const int64_t n = points.shape()[0], k = initial.shape()[0], f = initial.shape()[1];
  const std::vector<float> x = contiguous(points).to_vector<float>();
  // scikit-learn's tolerance is relative to the data's mean variance per feature (over all ranks).
  std::vector<double> moments(static_cast<size_t>(2 * f + 1), 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < f; ++j) {
      const double v = x[static_cast<size_t>(i * f + j)];
      moments[static_cast<size_t>(j)] += v, moments[static_cast<size_t>(f + j)] += v * v;
    }
  moments[static_cast<size_t>(2 * f)] = static_cast<double>(n);
  sum_over_ranks(moments, group);
  const double total = moments[static_cast<size_t>(2 * f)];
  TESSERA_CHECK(total >= static_cast<double>(k), "[kmeans] ", total, " points in all for ", k, " clusters");
  double variance = 0;
  for (int64_t j = 0; j < f; ++j) {
    const double mean = moments[static_cast<size_t>(j)] / total;
    variance += moments[static_cast<size_t>(f + j)] / total - mean * mean;
  }
  const double tolerance = o.tolerance * variance / static_cast<double>(f);

  KMeansResult r;
  std::vector<float> centroids = contiguous(initial).to_vector<float>();
  for (r.iterations = 1; r.iterations <= o.max_iterations; ++r.iterations) {
    const Tensor c = from_vector(centroids, {k, f});
    const std::vector<int64_t> label = nearest_centroid(points, c).to_vector<int64_t>();
    // (sums k·F, counts k, inertia 1), summed over the ranks in one all-reduce.
    std::vector<double> acc(static_cast<size_t>(k * f + k + 1), 0.0);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t a = label[static_cast<size_t>(i)];
      double d2 = 0;
      for (int64_t j = 0; j < f; ++j) {
        const double v = x[static_cast<size_t>(i * f + j)];
        acc[static_cast<size_t>(a * f + j)] += v;
        const double diff = v - centroids[static_cast<size_t>(a * f + j)];
        d2 += diff * diff;
      }
      acc[static_cast<size_t>(k * f + a)] += 1;
      acc[static_cast<size_t>(k * f + k)] += d2;
    }
    sum_over_ranks(acc, group);
    r.inertia = acc[static_cast<size_t>(k * f + k)];
    double shift = 0;
    for (int64_t a = 0; a < k; ++a) {
      const double count = acc[static_cast<size_t>(k * f + a)];
      if (count == 0) continue;  // empty: keeps its centroid
      for (int64_t j = 0; j < f; ++j) {
        const float next = static_cast<float>(acc[static_cast<size_t>(a * f + j)] / count);
        const double d = next - centroids[static_cast<size_t>(a * f + j)];
        shift += d * d;
        centroids[static_cast<size_t>(a * f + j)] = next;
      }
    }
    if (shift <= tolerance) {
      r.converged = true;
      break;
    }
  }
  r.iterations = std::min(r.iterations, o.max_iterations);
  r.centroids = from_vector(centroids, {k, f});
  return r;
}

}  // namespace tessera::parallel
