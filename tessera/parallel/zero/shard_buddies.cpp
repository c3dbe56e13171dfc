#include "tessera/parallel/zero/shard_buddies.h"

#include <bit>
#include <cstring>

#include "tessera/ops/ops.h"

namespace tessera::parallel::zero {

using tessera::detail::concat;

namespace {

constexpr int kRingTag = 0x5a42;

// Reads the header packed before the buffers (zero_data_parallel.h) of pieces received from rank
// `from`, checking it against what this rank expects of them.
void read_header(PackedPieces& p, int64_t head, int from, size_t buffers) {
  int64_t h[5];
  std::memcpy(h, p.values.data<float>() + head, sizeof h);
  TESSERA_CHECK(h[3] == static_cast<int64_t>(buffers) && h[4] == p.values.numel() && h[0] >= 0, "[live membership] rank ",
                from, " sent ZeRO pieces of step ", h[0], " with ", h[3], " optimizer buffers and ", h[4],
                " values; expected ", buffers, " buffers and ", p.values.numel(), " values");
  p.step = h[0];
  p.optimizer_steps = h[1];
  p.lr = std::bit_cast<double>(h[2]);
}

}  // namespace

dist::WorkPtr send_pieces(dist::ProcessGroup& group, const PackedPieces& pieces, int to, int tag) {
  return group.send(pieces.values, to, tag);
}

PackedPieces receive_pieces(dist::ProcessGroup& group, int from, int tag, const ZeroDataParallel& layout, int layout_rank,
                            const std::vector<std::string>& buffers) {
  PackedPieces out;
  out.buffers = buffers;
  out.values = Tensor::empty({layout.packed_size(layout_rank, buffers.size())});
  group.recv(out.values, from, tag)->wait();
  read_header(out, layout.packed_parameters_size(), from, buffers.size());
  return out;
}

void ShardBuddies::commit(const optim::Optimizer& optimizer, int64_t step) {
  // The oldest versions' memory is written over: a rank that fails in this exchange is still at
  // the step before, and every member at least there (shard_buddies.h), so they are needed no more.
  Tensor reuse = std::move(own_[1].values);
  own_[1] = {};
  PackedPieces mine = zero_.pack_pieces(optimizer, step, reuse);
  const int n = world();
  if (n > 1) {
    dist::ProcessGroup& group = *zero_.group();
    const int next = (rank() + 1) % n, previous = (rank() + n - 1) % n;
    PackedPieces theirs;
    theirs.buffers = mine.buffers;
    const int64_t size = zero_.packed_size(previous, mine.buffers.size());
    Tensor kept = std::move(previous_rank_[1].values);
    previous_rank_[1] = {};
    theirs.values = kept.defined() && kept.numel() == size ? kept : Tensor::empty({size});
    // The header and the optimizer's buffers travel, as one message: the parameters' chunks are in
    // the whole parameters every rank gathered at this step, and are copied from there.
    const int64_t head = zero_.packed_parameters_size();
    dist::WorkPtr received = group.recv(theirs.values.slice(0, head, size), previous, kRingTag);
    dist::WorkPtr sent = group.send(mine.values.slice(0, head, mine.values.numel()), next, kRingTag);
    received->wait();
    sent->wait();
    read_header(theirs, head, previous, mine.buffers.size());
    TESSERA_CHECK(theirs.step == step, "[live membership] rank ", previous, " sent its ZeRO pieces of step ", theirs.step,
                  " at step ", step);
    zero_.copy_parameter_chunks(previous, theirs.values);
    // Only now, with both sides of the exchange done: a failure above leaves the latest versions.
    previous_rank_[1] = std::move(previous_rank_[0]);
    previous_rank_[0] = std::move(theirs);
  }
  own_[1] = std::move(own_[0]);
  own_[0] = std::move(mine);
}

const PackedPieces* ShardBuddies::find(const std::array<PackedPieces, 2>& versions, int64_t step) {
  for (const PackedPieces& v : versions)
    if (v.values.defined() && v.step == step) return &v;
  return nullptr;
}

}  // namespace tessera::parallel::zero
