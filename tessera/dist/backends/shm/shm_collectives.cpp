// The collectives of ShmCommunicator, as rounds over the shared slots (the protocol is described
// in shm_communicator.h). With one rank every collective is a local copy or nothing.
#include <algorithm>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "tessera/core/error.h"
#include "tessera/dist/backends/shm/shm_communicator.h"
#include "tessera/dist/backends/shm/shm_reduce.h"

namespace tessera::dist {

using tessera::detail::concat;

namespace {

constexpr size_t kLine = 64;

char* bytes(const Buffer& b) { return static_cast<char*>(b.data); }

// Start of rank j's share of an m-element round split n ways, on a cache-line boundary so that
// no two ranks write the same line of the output or of a slot.
int64_t share_begin(int64_t m, int j, int n, int64_t line_elems) {
  if (j >= n) return m;
  return m * j / n / line_elems * line_elems;
}

// Elements [lo, lo + per) of a piece of `count` elements, clipped: how much of it round `lo` moves.
int64_t piece(int64_t count, int64_t lo, int64_t per) { return std::clamp<int64_t>(count - lo, 0, per); }

void copy(void* dst, const void* src, int64_t n, size_t elem) {
  if (n > 0 && dst != src) std::memmove(dst, src, static_cast<size_t>(n) * elem);
}

// What a rank passes to a symmetric allreduce, written to its slot for the peers to compare: a
// rank that passed other memory, or another buffer, count or op, fails the allreduce on every rank.
struct SymmetricCall {
  uint64_t magic = 0;
  // A slotted multi-round allreduce never writes the start of its own rank's slot (its own share
  // stays in its buffer), so a descriptor of an earlier call can still be there: the round tells.
  uint64_t round = 0;
  uint64_t buffer_id = 0;
  uint64_t offset = 0;
  int64_t count = 0;
  int32_t dtype = 0;
  int32_t op = 0;
  bool operator==(const SymmetricCall&) const = default;
  std::string text() const {
    return concat("symmetric buffer #", buffer_id, " at byte ", offset, ", ", count, " x ",
                  dtype_name(static_cast<DType>(dtype)), ", ", reduce_op_name(static_cast<ReduceOp>(op)));
  }
};
constexpr uint64_t kSymmetricCallMagic = 0x73796d6d'63616c6cull;  // "symmcall"

}  // namespace

void ShmCommunicator::allreduce(Buffer data, ReduceOp op, Deadline deadline) {
  if (size_ == 1) return;
  // Only where the slotted allreduce would take two rounds or more: a peer that passed ordinary
  // memory then waits for a second round this rank never starts, so a mismatch is an error on
  // every rank (the descriptor check here, a timeout there), never a silently wrong sum.
  if (data.nbytes() > std::min(kOneRoundBytes, chunk_bytes_) && allreduce_symmetric(data, op, deadline)) return;
  reduce_rounds(data, op, -1, "allreduce", deadline);
}

bool ShmCommunicator::allreduce_symmetric(Buffer data, ReduceOp op, Deadline deadline) {
  std::shared_ptr<detail::SymmetricBuffer> buffer = symmetric_->find(data.data, data.nbytes(), rank_);
  if (!buffer) return false;
  const int n = size_, r = rank_;
  const size_t es = dtype_size(data.dtype);
  const size_t offset = static_cast<size_t>(bytes(data) - buffer->base[static_cast<size_t>(r)]);
  // Wait 1: every input complete. The peers read my descriptor before they arrive at the next round.
  const uint64_t k = begin_round("allreduce", deadline, 2);
  SymmetricCall mine{kSymmetricCallMagic, k, buffer->id, offset, data.count, static_cast<int32_t>(data.dtype),
                     static_cast<int32_t>(op)};
  std::memcpy(slot(r, k), &mine, sizeof(mine));
  arrive_and_wait(k, "allreduce", deadline);
  for (int p = 0; p < n; ++p) {
    if (p == r) continue;
    SymmetricCall theirs;
    std::memcpy(&theirs, slot(p, k), sizeof(theirs));
    if (theirs.magic != kSymmetricCallMagic || theirs.round != k)
      throw ValueError(concat("[shm allreduce] rank ", r, " passed ", mine.text(), ", but rank ", p,
                              " passed ordinary memory; every rank must allreduce its own symmetric buffer"));
    if (!(theirs == mine))
      throw ValueError(concat("[shm allreduce] rank ", r, " passed ", mine.text(), ", but rank ", p, " passed ",
                              theirs.text()));
  }
  // My share across every rank's buffer, in rank order, into every rank's buffer.
  const int64_t line = static_cast<int64_t>(kLine / es);
  const int64_t lo = share_begin(data.count, r, n, line), hi = share_begin(data.count, r + 1, n, line);
  if (hi > lo) {
    std::vector<void*> at(static_cast<size_t>(n));
    for (int p = 0; p < n; ++p) at[static_cast<size_t>(p)] = buffer->base[static_cast<size_t>(p)] + offset + static_cast<size_t>(lo) * es;
    std::vector<const void*> src(at.begin(), at.end());
    detail::shm_reduce_into(at.data(), n, src.data(), n, hi - lo, data.dtype, op);
  }
  // Wait 2: every share written everywhere.
  arrive_and_wait(round_++, "allreduce", deadline);
  ++symmetric_allreduces_;
  return true;
}

void ShmCommunicator::reduce(Buffer data, ReduceOp op, int root, Deadline deadline) {
  if (size_ == 1) return;
  reduce_rounds(data, op, root, "reduce", deadline);
}

void ShmCommunicator::reduce_rounds(Buffer data, ReduceOp op, int root, const char* name, Deadline deadline) {
  if (data.nbytes() <= std::min(kOneRoundBytes, chunk_bytes_)) return reduce_one_round(data, op, root, name, deadline);
  const size_t es = dtype_size(data.dtype);
  const int64_t per_round = static_cast<int64_t>(chunk_bytes_ / es);
  const int64_t line = static_cast<int64_t>(kLine / es);
  const int n = size_, r = rank_;
  const bool result_here = root < 0 || root == r;  // copies the others' results out
  const bool result_shared = root < 0 || root != r;  // puts its own result in its slot
  std::vector<const void*> src(static_cast<size_t>(n));
  char* d = bytes(data);
  auto begin = [&](int64_t m, int j) { return share_begin(m, j, n, line); };
  // Chunk i of the tensor: elements [i * per_round, + m).
  auto copy_out = [&](int64_t base, int64_t m, uint64_t k) {
    for (int p = 0; p < n; ++p) {
      if (p != r) copy(d + (base + begin(m, p)) * es, slot(p, k) + begin(m, p) * es, begin(m, p + 1) - begin(m, p), es);
    }
  };
  int64_t prev_base = 0, prev_m = 0;
  uint64_t prev_k = 0;
  for (int64_t base = 0; base < data.count; base += per_round) {
    const int64_t m = std::min(per_round, data.count - base);
    const uint64_t k = begin_round(name, deadline, 3);  // chunk i is copied out in round k + 1
    char* mine = slot(r, k);
    // The other ranks' shares of my input into my slot; my own share stays where it is.
    for (int j = 0; j < n; ++j) {
      if (j != r) copy(mine + begin(m, j) * es, d + (base + begin(m, j)) * es, begin(m, j + 1) - begin(m, j), es);
    }
    arrive_and_wait(k, name, deadline);
    // Every peer reduced the previous chunk before arriving here.
    if (prev_m > 0 && result_here) copy_out(prev_base, prev_m, prev_k);
    // My share, reduced across every rank in rank order, to my output and (for the others to
    // copy) to my slot, whose share r the copy-in above left free.
    const int64_t lo = begin(m, r), len = begin(m, r + 1) - lo;
    for (int p = 0; p < n; ++p) src[static_cast<size_t>(p)] = p == r ? d + (base + lo) * es : slot(p, k) + lo * es;
    if (len > 0) {
      void* out = result_here ? d + (base + lo) * es : mine + lo * es;
      void* out_copy = result_here && result_shared ? mine + lo * es : nullptr;
      detail::shm_reduce(out, out_copy, src.data(), n, len, data.dtype, op);
    }
    prev_base = base;
    prev_m = m;
    prev_k = k;
  }
  // A last round without data: everyone's last share is reduced once everyone arrives.
  const uint64_t k = round_++;
  arrive_and_wait(k, name, deadline);
  if (result_here) copy_out(prev_base, prev_m, prev_k);
}

void ShmCommunicator::reduce_one_round(Buffer data, ReduceOp op, int root, const char* name, Deadline deadline) {
  // The peers read my slot after their wait of round k and before they arrive at round k + 1.
  const uint64_t k = begin_round(name, deadline, 2);
  copy(slot(rank_, k), data.data, data.count, dtype_size(data.dtype));
  arrive_and_wait(k, name, deadline);
  if (root >= 0 && root != rank_) return;
  // The whole tensor, across every rank in rank order: bitwise the same result on every rank.
  std::vector<const void*> src(static_cast<size_t>(size_));
  for (int p = 0; p < size_; ++p) src[static_cast<size_t>(p)] = p == rank_ ? data.data : slot(p, k);
  detail::shm_reduce(data.data, nullptr, src.data(), size_, data.count, data.dtype, op);
}

void ShmCommunicator::broadcast(Buffer data, int root, Deadline deadline) {
  if (size_ == 1) return;
  const size_t total = data.nbytes();
  char* d = bytes(data);
  for (size_t off = 0; off < total; off += chunk_bytes_) {
    const size_t len = std::min(chunk_bytes_, total - off);
    if (rank_ == root) {
      // The root waits for nobody but a free buffer, so it runs up to two rounds ahead.
      const uint64_t k = begin_round("broadcast", deadline, 1);
      std::memcpy(slot(root, k), d + off, len);
      sync_->publish(static_cast<uint32_t>(k + 1));
    } else {
      const uint64_t k = round_++;
      sync_->wait(static_cast<uint32_t>(k + 1), "broadcast", deadline, root);
      std::memcpy(d + off, slot(root, k), len);
      sync_->publish(static_cast<uint32_t>(k + 1));
    }
  }
}

void ShmCommunicator::allgather(Buffer input, Buffer output, std::span<const int64_t> counts, Deadline deadline) {
  const size_t es = dtype_size(input.dtype);
  const int n = size_, r = rank_;
  std::vector<int64_t> offset(static_cast<size_t>(n) + 1, 0);
  for (int p = 0; p < n; ++p) offset[static_cast<size_t>(p) + 1] = offset[static_cast<size_t>(p)] + counts[static_cast<size_t>(p)];
  char* in = bytes(input);
  char* out = bytes(output);
  const int64_t own = counts[static_cast<size_t>(r)];
  if (n == 1) {
    copy(out, in, own, es);
    return;
  }
  const int64_t per_round = static_cast<int64_t>(chunk_bytes_ / es);
  const int64_t longest = *std::max_element(counts.begin(), counts.end());
  for (int64_t lo = 0; lo < longest; lo += per_round) {
    const uint64_t k = begin_round("allgather", deadline, 2);
    const int64_t mine = piece(own, lo, per_round);
    if (mine > 0) std::memcpy(slot(r, k), in + lo * es, static_cast<size_t>(mine) * es);
    sync_->publish(static_cast<uint32_t>(k + 1));
    // My own piece goes straight to my output, while the peers fill their slots.
    copy(out + (offset[static_cast<size_t>(r)] + lo) * es, in + lo * es, mine, es);
    sync_->wait(static_cast<uint32_t>(k + 1), "allgather", deadline);
    for (int p = 0; p < n; ++p) {
      if (p == r) continue;
      copy(out + (offset[static_cast<size_t>(p)] + lo) * es, slot(p, k), piece(counts[static_cast<size_t>(p)], lo, per_round),
           es);
    }
  }
}

void ShmCommunicator::reduce_scatter(Buffer input, Buffer output, std::span<const int64_t> counts, ReduceOp op,
                                     Deadline deadline) {
  exchange_rounds(input, output, counts, true, op, "reduce_scatter", deadline);
}

void ShmCommunicator::alltoall(Buffer input, Buffer output, Deadline deadline) {
  std::vector<int64_t> counts(static_cast<size_t>(size_), input.count / size_);
  exchange_rounds(input, output, counts, false, ReduceOp::Sum, "alltoall", deadline);
}

void ShmCommunicator::exchange_rounds(Buffer input, Buffer output, std::span<const int64_t> counts, bool reduce,
                                      ReduceOp op, const char* name, Deadline deadline) {
  const size_t es = dtype_size(input.dtype);
  const int n = size_, r = rank_;
  // Piece j of the input (for rank j) starts at in_off[j]; for reduce_scatter it is segment j of
  // the input, for alltoall block j. Alltoall puts rank p's piece at block p of the output.
  std::vector<int64_t> in_off(static_cast<size_t>(n), 0);
  for (int p = 1; p < n; ++p) in_off[static_cast<size_t>(p)] = in_off[static_cast<size_t>(p) - 1] + counts[static_cast<size_t>(p) - 1];
  const int64_t mine_count = counts[static_cast<size_t>(r)];
  char* in = bytes(input);
  char* out = bytes(output);
  if (n == 1) {
    copy(out, in, mine_count, es);
    return;
  }
  // Each slot buffer holds one area per destination rank, on cache-line boundaries.
  const size_t area_bytes = chunk_bytes_ / static_cast<size_t>(n) / kLine * kLine;
  const int64_t per_round = static_cast<int64_t>(area_bytes / es);
  const int64_t longest = *std::max_element(counts.begin(), counts.end());
  std::vector<const void*> src(static_cast<size_t>(n));
  for (int64_t lo = 0; lo < longest; lo += per_round) {
    const uint64_t k = begin_round(name, deadline, 2);
    char* mine = slot(r, k);
    for (int j = 0; j < n; ++j) {
      if (j == r) continue;
      const int64_t len = piece(counts[static_cast<size_t>(j)], lo, per_round);
      copy(mine + static_cast<size_t>(j) * area_bytes, in + (in_off[static_cast<size_t>(j)] + lo) * es, len, es);
    }
    sync_->publish(static_cast<uint32_t>(k + 1));
    const int64_t len = piece(mine_count, lo, per_round);
    if (!reduce) copy(out + (in_off[static_cast<size_t>(r)] + lo) * es, in + (in_off[static_cast<size_t>(r)] + lo) * es, len, es);
    sync_->wait(static_cast<uint32_t>(k + 1), name, deadline);
    if (reduce) {
      for (int p = 0; p < n; ++p) {
        src[static_cast<size_t>(p)] =
            p == r ? in + (in_off[static_cast<size_t>(r)] + lo) * es : slot(p, k) + static_cast<size_t>(r) * area_bytes;
      }
      if (len > 0) detail::shm_reduce(out + lo * es, nullptr, src.data(), n, len, input.dtype, op);
    } else {
      for (int p = 0; p < n; ++p) {
        if (p != r) copy(out + (in_off[static_cast<size_t>(p)] + lo) * es, slot(p, k) + static_cast<size_t>(r) * area_bytes, len, es);
      }
    }
  }
}

void ShmCommunicator::barrier(Deadline deadline) {
  if (size_ == 1) return;
  arrive_and_wait(round_++, "barrier", deadline);  // writes no slot, so it needs no free buffer
}

}  // namespace tessera::dist
