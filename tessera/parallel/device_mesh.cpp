#include "tessera/parallel/device_mesh.h"

#include <functional>

namespace tessera::parallel {

MeshShape resolve_mesh_shape(MeshShape s, int world) {
  TESSERA_CHECK(s.pp >= 1 && s.tp >= 1 && s.dp >= 0, "[mesh] dp, pp and tp must be positive (dp 0: from the world "
                "size), got dp ", s.dp, ", pp ", s.pp, ", tp ", s.tp);
  if (s.dp == 0) {
    TESSERA_CHECK(world % (s.pp * s.tp) == 0, "[mesh] ", world, " ranks do not divide into pipelines of pp ", s.pp,
                  " × tp ", s.tp, " = ", s.pp * s.tp, " ranks; start a multiple of ", s.pp * s.tp, " processes");
    s.dp = world / (s.pp * s.tp);
  }
  TESSERA_CHECK(s.size() == world, "[mesh] dp ", s.dp, " × pp ", s.pp, " × tp ", s.tp, " = ", s.size(),
                " ranks, but the job has ", world, "; set parallel.dp = 0 to derive it");
  return s;
}

MeshCoordinates mesh_coordinates(const MeshShape& s, int rank) {
  TESSERA_CHECK(rank >= 0 && rank < s.size(), "[mesh] rank ", rank, " outside a mesh of ", s.size());
  return {rank / (s.pp * s.tp), (rank / s.tp) % s.pp, rank % s.tp};
}

int mesh_rank(const MeshShape& s, const MeshCoordinates& at) { return (at.dp * s.pp + at.pp) * s.tp + at.tp; }

DeviceMesh::DeviceMesh(dist::ProcessGroupPtr world, MeshShape shape) : world_(std::move(world)) {
  TESSERA_CHECK(world_, "[mesh] needs the world's process group");
  shape_ = resolve_mesh_shape(shape, world_->size());
  at_ = mesh_coordinates(shape_, world_->rank());
  // One group per line along an axis; every rank creates all of them in the same order and keeps
  // the one it belongs to.
  auto make_axis = [&](int extent, const std::function<MeshCoordinates(int line, int i)>& at, int lines) {
    dist::ProcessGroupPtr mine;
    for (int line = 0; line < lines; ++line) {
      std::vector<int> ranks;
      for (int i = 0; i < extent; ++i) ranks.push_back(mesh_rank(shape_, at(line, i)));
      auto g = world_->new_group(ranks);
      if (g) mine = g;
    }
    return mine;
  };
  const MeshShape s = shape_;
  tp_group_ = make_axis(s.tp, [s](int line, int i) { return MeshCoordinates{line / s.pp, line % s.pp, i}; }, s.dp * s.pp);
  pp_group_ = make_axis(s.pp, [s](int line, int i) { return MeshCoordinates{line / s.tp, i, line % s.tp}; }, s.dp * s.tp);
  dp_group_ = make_axis(s.dp, [s](int line, int i) { return MeshCoordinates{i, line / s.tp, line % s.tp}; }, s.pp * s.tp);
  TESSERA_ASSERT(tp_group_ && pp_group_ && dp_group_, "every rank belongs to one group per axis");
}

std::string DeviceMesh::describe() const {
  return "rank " + std::to_string(world_->rank()) + " of " + std::to_string(world_->size()) + ": dp " +
         std::to_string(at_.dp) + "/" + std::to_string(shape_.dp) + ", pp " + std::to_string(at_.pp) + "/" +
         std::to_string(shape_.pp) + ", tp " + std::to_string(at_.tp) + "/" + std::to_string(shape_.tp);
}

}  // namespace tessera::parallel
