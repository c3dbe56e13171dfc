// ShardBuddies: ZeRO-1/2 under live membership (train/trainer_live.cpp). A rank's pieces of the
// optimizer state exist nowhere else, so a lost rank would take them with it: after every step each
// rank sends its pieces (zero_data_parallel.h's PackedPieces) to the next rank of the ring and keeps
// the previous rank's. When a rank is lost, the next one holds its pieces; when two neighbours are
// lost at once, the first one's are gone (the job then cannot go on live).
//
// Why two versions of each: a loss may come while some ranks have finished step s+1 (their pieces
// sent and received) and others have not. No rank finishes step s+2's reduce-scatter before every
// rank has sent its pieces of s+1 (the step boundary's collective comes between), so the members'
// steps differ by at most one, and the state every member can rebuild is that of the lowest step
// among them: the ranks one step ahead keep their pieces and their neighbour's of the step before.
// That step is redone (at most one per loss).
//
// Cost per step and rank, with Adam: the rank's share of the two moments (8Ψ/N bytes) sent to one
// neighbour (its share of the parameters is in every rank's gathered parameters, and copied from
// there), and four shares of parameters and moments kept (two of its own, two of the
// neighbour's): 48Ψ/N bytes of memory.
#pragma once
#include <array>

#include "tessera/parallel/zero/zero_data_parallel.h"

namespace tessera::parallel::zero {

class ShardBuddies {
 public:
  explicit ShardBuddies(const ZeroDataParallel& zero) : zero_(zero) {}

  // After the trainer's step `step` (or at the start: the state as it is): this rank's pieces go to
  // the next rank, the previous rank's come here. Collective over the ring of the job's group.
  void commit(const optim::Optimizer& optimizer, int64_t step);
  // This rank's pieces, and the previous rank's it keeps, as they were after `step` (null: not kept).
  const PackedPieces* own_at(int64_t step) const { return find(own_, step); }
  const PackedPieces* previous_rank_at(int64_t step) const { return find(previous_rank_, step); }

  bool committed() const { return own_[0].values.defined(); }
  int rank() const { return zero_.group()->rank(); }
  int world() const { return zero_.group()->size(); }
  const ZeroDataParallel& zero() const { return zero_; }

 private:
  static const PackedPieces* find(const std::array<PackedPieces, 2>& versions, int64_t step);
  const ZeroDataParallel& zero_;
  std::array<PackedPieces, 2> own_, previous_rank_;  // [0] the latest
};

// How a rank's pieces travel whole (the membership change; the ring sends all but the parameters'
// chunks): one message, its header inside (zero_data_parallel.h's PackedPieces).
dist::WorkPtr send_pieces(dist::ProcessGroup& group, const PackedPieces& pieces, int to, int tag);
// Receives rank `from`'s pieces; `buffers` names them (every rank's are the same), `layout` sizes
// them by `layout_rank`, the rank that packed them in its layout.
PackedPieces receive_pieces(dist::ProcessGroup& group, int from, int tag, const ZeroDataParallel& layout, int layout_rank,
                            const std::vector<std::string>& buffers);

}  // namespace tessera::parallel::zero
