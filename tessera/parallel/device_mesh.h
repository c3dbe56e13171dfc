// DeviceMesh: the job's ranks laid out as a DP × PP × TP grid, with a process group along each axis.
//
// Rank layout (Megatron-LM's): tensor-parallel ranks are adjacent, then pipeline stages, then
// data-parallel replicas:  rank = (dp_index · PP + pp_index) · TP + tp_index.
// Tensor parallelism exchanges activations inside every layer, so its ranks should be the closest
// (the same machine); data parallelism talks once per step and tolerates the farthest.
// Example, 4 ranks as DP=2 × PP=2: pipelines {0,1} and {2,3}, replicas of each stage {0,2} and {1,3}.
#pragma once
#include <string>

#include "tessera/dist/process_group.h"

namespace tessera::parallel {

struct MeshShape {
  int dp = 1, pp = 1, tp = 1;
  int size() const { return dp * pp * tp; }
};

// Fills in dp when it is 0 (the world size divided by pp·tp) and checks the product is the world
// size; ValueError naming the numbers otherwise.
MeshShape resolve_mesh_shape(MeshShape shape, int world_size);

struct MeshCoordinates {
  int dp = 0, pp = 0, tp = 0;
};
MeshCoordinates mesh_coordinates(const MeshShape& shape, int rank);
int mesh_rank(const MeshShape& shape, const MeshCoordinates& at);

class DeviceMesh {
 public:
  // Collective over `world`: every rank constructs its mesh at the same point (the subgroups are
  // created with ProcessGroup::new_group, in the same order everywhere).
  DeviceMesh(dist::ProcessGroupPtr world, MeshShape shape);

  const MeshShape& shape() const { return shape_; }
  const MeshCoordinates& coordinates() const { return at_; }
  const dist::ProcessGroupPtr& world() const { return world_; }
  // The ranks that differ from this one only along that axis.
  const dist::ProcessGroupPtr& dp_group() const { return dp_group_; }
  const dist::ProcessGroupPtr& pp_group() const { return pp_group_; }
  const dist::ProcessGroupPtr& tp_group() const { return tp_group_; }
  std::string describe() const;  // "rank 3 of 4: dp 1/2, pp 1/2, tp 0/1"

 private:
  dist::ProcessGroupPtr world_;
  MeshShape shape_;
  MeshCoordinates at_;
  dist::ProcessGroupPtr dp_group_, pp_group_, tp_group_;
};

}  // namespace tessera::parallel
