#include "tessera/parallel/zero/shard_buddies.h"

#include <bit>
#include <cstring>

#include "tessera/ops/ops.h"

namespace tessera::parallel::zero {

using tessera::detail::concat;

namespace {
constexpr int kRingTag = 0x5a42;  // the ring's header; its values come with kRingTag + 1
constexpr int kHeaderWords = 5;
}  // namespace

void send_pieces(dist::ProcessGroup& group, const PackedPieces& pieces, int to, int tag, std::vector<dist::WorkPtr>& works) {
  Tensor header = from_vector(std::vector<int64_t>{pieces.step, pieces.optimizer_steps, std::bit_cast<int64_t>(pieces.lr),
                                                   static_cast<int64_t>(pieces.buffers.size()), pieces.values.numel()},
                              {kHeaderWords});
  works.push_back(group.send(header, to, tag));
  works.push_back(group.send(pieces.values, to, tag + 1));
}

PackedPieces receive_pieces(dist::ProcessGroup& group, int from, int tag, const ZeroDataParallel& layout, int layout_rank,
                            const std::vector<std::string>& buffers) {
  Tensor header = Tensor::empty({kHeaderWords}, DType::Int64);
  group.recv(header, from, tag)->wait();
  const int64_t* h = header.data<int64_t>();
  const int64_t expected = layout.packed_size(layout_rank, buffers.size());
  TESSERA_CHECK(h[3] == static_cast<int64_t>(buffers.size()) && h[4] == expected, "[live membership] rank ", from,
                " sent ZeRO pieces of ", h[4], " values with ", h[3], " optimizer buffers; expected ", expected, " with ",
                buffers.size());
  PackedPieces out;
  out.step = h[0];
  out.optimizer_steps = h[1];
  out.lr = std::bit_cast<double>(h[2]);
  out.buffers = buffers;
  out.values = Tensor::empty({expected});
  group.recv(out.values, from, tag + 1)->wait();
  return out;
}

void ShardBuddies::commit(const optim::Optimizer& optimizer, int64_t step) {
  PackedPieces mine = zero_.pack_pieces(optimizer, step);
  const int n = world();
  if (n > 1) {
    const int next = (rank() + 1) % n, previous = (rank() + n - 1) % n;
    std::vector<dist::WorkPtr> sends;
    send_pieces(*zero_.group(), mine, next, kRingTag, sends);
    PackedPieces theirs = receive_pieces(*zero_.group(), previous, kRingTag, zero_, previous, mine.buffers);
    for (auto& w : sends) w->wait();
    TESSERA_CHECK(theirs.step == step, "[live membership] rank ", previous, " sent its ZeRO pieces of step ", theirs.step,
                  " at step ", step);
    // Only now, with both sides of the exchange done: a failure above leaves the versions as they were.
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
