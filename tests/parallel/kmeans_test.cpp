// Data-parallel k-means (parallel/kmeans.h): it finds planted clusters, and ranks holding uneven parts
// of the points (one holding none) end where one process on all of them ends.
#include <gtest/gtest.h>

#include "parallel/threaded_group.h"
#include "tessera/ops/ops.h"
#include "tessera/parallel/kmeans.h"
#include "testing/expect.h"

namespace tessera {
namespace {

using testing::threaded;

// 3 blobs of 40 points around (0,0), (10,0), (0,10), interleaved.
Tensor blobs() {
  Generator gen(21);
  Tensor noise = randn({120, 2}, gen);
  std::vector<float> centres;
  for (int i = 0; i < 120; ++i) {
    const int c = i % 3;
    centres.push_back(c == 1 ? 10.0f : 0.0f), centres.push_back(c == 2 ? 10.0f : 0.0f);
  }
  return add(from_vector(centres, {120, 2}), mul(noise, 0.5f));
}

TEST(KMeans, FindsThePlantedClusters) {
  Tensor x = blobs();
  parallel::KMeansResult r = parallel::kmeans(x, contiguous(slice(x, 0, 0, 3)));
  EXPECT_TRUE(r.converged);
  const std::vector<float> c = r.centroids.to_vector<float>();
  EXPECT_NEAR(c[0], 0, 0.3);
  EXPECT_NEAR(c[1], 0, 0.3);
  EXPECT_NEAR(c[2], 10, 0.3);
  EXPECT_NEAR(c[3], 0, 0.3);
  EXPECT_NEAR(c[4], 0, 0.3);
  EXPECT_NEAR(c[5], 10, 0.3);
  const std::vector<int64_t> labels = parallel::nearest_centroid(x, r.centroids).to_vector<int64_t>();
  for (int i = 0; i < 120; ++i) EXPECT_EQ(labels[static_cast<size_t>(i)], i % 3) << i;
}

TEST(KMeans, RanksWithUnevenPartsEqualOneProcess) {
  Tensor x = blobs();
  Tensor init = from_vector(std::vector<float>{1, 1, 5, 5, -1, 4}, {3, 2});  // a poor start: several iterations
  parallel::KMeansResult one = parallel::kmeans(x, init);
  EXPECT_GT(one.iterations, 2);
  const int world = 3;
  const int64_t bounds[world + 1] = {0, 70, 70, 120};  // rank 1 holds no points
  std::vector<parallel::KMeansResult> results(world);
  testing::run_on_threads(world, threaded(world), [&](dist::ProcessGroup& group) {
    const int r = group.rank();
    results[static_cast<size_t>(r)] = parallel::kmeans(contiguous(slice(x, 0, bounds[r], bounds[r + 1])), init, {}, &group);
  });
  for (const auto& r : results) {
    EXPECT_EQ(r.iterations, one.iterations);
    EXPECT_NEAR(r.inertia, one.inertia, 1e-3 * one.inertia);
    testing::expect_near(r.centroids, one.centroids.to_vector<float>(), 1e-4f);
  }
}

TEST(KMeans, BadArgumentsAreRefused) {
  Tensor x = blobs();
  EXPECT_THROW(parallel::kmeans(x, zeros({3, 5})), ValueError);
  EXPECT_THROW(parallel::kmeans(slice(x, 0, 0, 2), zeros({3, 2})), ValueError);  // fewer points than clusters
  EXPECT_THROW(parallel::kmeans(x, zeros({3, 2}), {.max_iterations = 0}), ValueError);
}

}  // namespace
}  // namespace tessera
