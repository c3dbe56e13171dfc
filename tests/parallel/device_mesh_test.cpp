// DeviceMesh: the DP × PP × TP layout of ranks and one group per axis.
#include <gtest/gtest.h>

#include <mutex>

#include "parallel/threaded_group.h"
#include "tessera/ops/ops.h"
#include "tessera/parallel/device_mesh.h"
#include "testing/expect.h"

namespace tessera::parallel {
namespace {

TEST(DeviceMeshShape, DerivesDataParallelAndChecksTheProduct) {
  EXPECT_EQ(resolve_mesh_shape({0, 2, 1}, 4).dp, 2);
  EXPECT_EQ(resolve_mesh_shape({0, 1, 2}, 8).dp, 4);
  testing::expect_error<ValueError>([] { resolve_mesh_shape({0, 3, 1}, 4); }, {"4 ranks", "pp 3"});
  testing::expect_error<ValueError>([] { resolve_mesh_shape({2, 2, 2}, 4); }, {"= 8 ranks", "has 4"});
}

TEST(DeviceMeshShape, CoordinatesRoundTrip) {
  MeshShape s{2, 3, 2};
  for (int r = 0; r < s.size(); ++r) EXPECT_EQ(mesh_rank(s, mesh_coordinates(s, r)), r);
  auto at = mesh_coordinates(s, 7);  // (1·3 + 0)·2 + 1
  EXPECT_EQ(at.dp, 1);
  EXPECT_EQ(at.pp, 0);
  EXPECT_EQ(at.tp, 1);
}

// Each axis group holds exactly the ranks that differ along that axis: checked by all-reducing the
// world rank along each axis.
class DeviceMeshGroups : public ::testing::TestWithParam<MeshShape> {};

TEST_P(DeviceMeshGroups, EachAxisGroupHoldsTheRanksAlongIt) {
  const MeshShape shape = GetParam();
  testing::run_on_threads(shape.size(), testing::threaded(shape.size()), [&](dist::ProcessGroup& world) {
    DeviceMesh mesh(testing::borrow(world), shape);
    const auto at = mesh.coordinates();
    auto sum_of_ranks = [&](const dist::ProcessGroupPtr& g) {
      Tensor t = from_vector(std::vector<float>{static_cast<float>(world.rank())}, {1});
      g->allreduce(t)->wait();
      return static_cast<int>(t.data<float>()[0]);
    };
    auto expected = [&](int axis) {
      int sum = 0;
      const int extent = axis == 0 ? shape.dp : axis == 1 ? shape.pp : shape.tp;
      for (int i = 0; i < extent; ++i) {
        MeshCoordinates c = at;
        (axis == 0 ? c.dp : axis == 1 ? c.pp : c.tp) = i;
        sum += mesh_rank(shape, c);
      }
      return sum;
    };
    EXPECT_EQ(mesh.dp_group()->size(), shape.dp);
    EXPECT_EQ(mesh.pp_group()->size(), shape.pp);
    EXPECT_EQ(mesh.tp_group()->size(), shape.tp);
    EXPECT_EQ(mesh.pp_group()->rank(), at.pp);
    EXPECT_EQ(mesh.tp_group()->rank(), at.tp);
    EXPECT_EQ(mesh.dp_group()->rank(), at.dp);
    EXPECT_EQ(sum_of_ranks(mesh.dp_group()), expected(0));
    EXPECT_EQ(sum_of_ranks(mesh.pp_group()), expected(1));
    EXPECT_EQ(sum_of_ranks(mesh.tp_group()), expected(2));
  });
}

INSTANTIATE_TEST_SUITE_P(Layouts, DeviceMeshGroups,
                         ::testing::Values(MeshShape{2, 2, 1}, MeshShape{2, 1, 2}, MeshShape{1, 2, 2}, MeshShape{2, 2, 2},
                                           MeshShape{1, 1, 1}, MeshShape{3, 1, 1}));

}  // namespace
}  // namespace tessera::parallel
