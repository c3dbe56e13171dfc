// What ZeRO's policies share: the model's parameters cut into flat units (flat_unit.h) and the
// buffers over them. The parameters are views of `full` (a unit's whole flat values); `shard` is
// this rank's chunk of each unit, which its optimizer's pieces view.
#pragma once
#include <cstdint>
#include <vector>

#include "tessera/dist/process_group.h"
#include "tessera/nn/module.h"
#include "tessera/parallel/zero/flat_unit.h"

namespace tessera::parallel::zero {

struct ZeroUnits {
  dist::ProcessGroupPtr group;
  int rank = 0, world = 1;
  nn::StateDict params;          // the model's parameters, in its order
  std::vector<FlatUnit> units;
  std::vector<Tensor> full;      // per unit: the whole flat values (the parameters view them)
  std::vector<Tensor> shard;     // per unit: this rank's chunk of the values
  int64_t bytes_communicated = 0;

  // This rank's chunk of unit `u` as a view of its whole values.
  Tensor chunk_of_full(size_t u) const {
    return full[u].slice(0, rank * units[u].chunk, (rank + 1) * units[u].chunk);
  }
};

inline int64_t bytes_of(const Tensor& t) {
  return t.defined() ? t.numel() * static_cast<int64_t>(dtype_size(t.dtype())) : 0;
}

}  // namespace tessera::parallel::zero
