#include "tessera/dist/backends/tcp/tcp_communicator.h"

#include "tessera/dist/backends/backend.h"

#include <sys/socket.h>

#include <algorithm>
#include <cstring>
#include <numeric>

#include "tessera/core/error.h"
#include "tessera/dist/backends/tcp/tcp_mesh.h"
#include "tessera/dist/backends/tcp/tcp_transfers.h"
#include "tessera/dist/store/prefix_store.h"
#include "tessera/util/settings.h"

namespace tessera::dist {

using detail::TcpCollective;
using detail::TcpTransfer;
using tessera::detail::concat;

namespace {

// Received elements are reduced in chunks of this many bytes as they arrive: large enough that the
// kernel call is not the cost, small enough that the reduction overlaps the rest of the receive.
constexpr size_t kReduceChunkBytes = 64 << 10;

bool power_of_two(int p) { return p > 0 && (p & (p - 1)) == 0; }

struct Segments {
  std::vector<int64_t> counts, offsets;
  int64_t max = 0;
  // Where segment i starts, in elements; begin(p) is the end of the last one.
  int64_t begin(int i) const {
    return i < static_cast<int>(offsets.size()) ? offsets[static_cast<size_t>(i)] : offsets.back() + counts.back();
  }
};

Segments segments_of(std::span<const int64_t> counts) {
  Segments s;
  s.counts.assign(counts.begin(), counts.end());
  s.offsets.resize(counts.size());
  int64_t at = 0;
  for (size_t i = 0; i < counts.size(); ++i) s.offsets[i] = at, at += counts[i], s.max = std::max(s.max, counts[i]);
  return s;
}

Segments even_segments(int64_t count, int p) {
  std::vector<int64_t> counts(static_cast<size_t>(p));
  for (int i = 0; i < p; ++i) counts[static_cast<size_t>(i)] = count / p + (i < count % p ? 1 : 0);
  return segments_of(counts);
}

class TcpCommunicator : public Communicator {
 public:
  TcpCommunicator(detail::TcpMesh mesh, std::unique_ptr<Communicator> point_to_point)
      : mesh_(std::move(mesh)), point_to_point_(std::move(point_to_point)) {}

  const char* backend_name() const override { return "tcp"; }
  // A collective checks the flag before each sleep in poll, and sleeps at most kTcpAbortSlice.
  bool abortable() const override { return true; }
  void abort() override { aborted_.store(true, std::memory_order_relaxed); }
  // Shut every connection down (the sockets stay open until the communicator goes): a peer waiting
  // for this rank reads the end of its stream at once, a PeerFailureError.
  void leave() override {
    abort();
    for (const auto& peer : mesh_.peers)
      if (peer.valid()) ::shutdown(peer.fd(), SHUT_RDWR);
  }
  int rank() const override { return mesh_.rank; }
  int size() const override { return mesh_.size; }

  void allreduce(Buffer data, ReduceOp op, Deadline deadline) override {
    const int p = size();
    if (p == 1) return;
    if (data.nbytes() <= kTcpSmallBytes && power_of_two(p)) return recursive_doubling(data, op, deadline);
    Segments seg = even_segments(data.count, p);
    if (halving_doubling(data.nbytes())) {
      halving_reduce_scatter(data, seg, op, TcpCollective::Allreduce, deadline);
      return doubling_allgather(data, seg, TcpCollective::Allreduce, deadline);
    }
    ring_reduce_scatter(data, seg, op, TcpCollective::Allreduce, deadline);
    ring_allgather(data, seg, TcpCollective::Allreduce, deadline);
  }

  void reduce(Buffer data, ReduceOp op, int root, Deadline deadline) override {
    check_rank(root, "reduce");
    allreduce(data, op, deadline);
  }

  void broadcast(Buffer data, int root, Deadline deadline) override {
    check_rank(root, "broadcast");
    const int p = size();
    if (p == 1) return;
    auto* bytes = static_cast<uint8_t*>(data.data);
    if (data.nbytes() <= kTcpSmallBytes || p == 2) {
      std::vector<TcpTransfer> t;
      if (rank() == root) {
        for (int r = 0; r < p; ++r)
          if (r != root) t.push_back(send_to(r, bytes, data.nbytes()));
      } else {
        t.push_back(recv_from(root, bytes, data.nbytes()));
      }
      return run(TcpCollective::Broadcast, t, deadline);
    }
    // Scatter from the root, then a ring all-gather completes every rank's copy.
    Segments seg = even_segments(data.count, p);
    const size_t esize = dtype_size(data.dtype);
    std::vector<TcpTransfer> t;
    if (rank() == root) {
      for (int r = 0; r < p; ++r)
        if (r != root) t.push_back(send_to(r, bytes + seg.offsets[r] * esize, seg.counts[r] * esize));
    } else {
      t.push_back(recv_from(root, bytes + seg.offsets[rank()] * esize, seg.counts[rank()] * esize));
    }
    run(TcpCollective::Broadcast, t, deadline);
    ring_allgather(data, seg, TcpCollective::Broadcast, deadline);
  }

  void allgather(Buffer input, Buffer output, std::span<const int64_t> counts, Deadline deadline) override {
    TESSERA_CHECK(static_cast<int>(counts.size()) == size() && input.count == counts[rank()], "[tcp allgather] rank ", rank(),
                  ": counts do not match the group or the input");
    Segments seg = segments_of(counts);
    if (input.count > 0 && input.data != output.slice(seg.offsets[rank()], 0).data)
      std::memcpy(output.slice(seg.offsets[rank()], 0).data, input.data, input.nbytes());
    if (size() == 1) return;
    if (halving_doubling(output.nbytes())) return doubling_allgather(output, seg, TcpCollective::Allgather, deadline);
    ring_allgather(output, seg, TcpCollective::Allgather, deadline);
  }

  void reduce_scatter(Buffer input, Buffer output, std::span<const int64_t> counts, ReduceOp op, Deadline deadline) override {
    TESSERA_CHECK(static_cast<int>(counts.size()) == size() && output.count == counts[rank()], "[tcp reduce_scatter] rank ",
                  rank(), ": counts do not match the group or the output");
    Segments seg = segments_of(counts);
    // The ring reduces in place: work on a copy, since the input is the caller's.
    work_.resize(input.nbytes());
    if (input.nbytes() > 0) std::memcpy(work_.data(), input.data, input.nbytes());
    Buffer work{work_.data(), input.count, input.dtype};
    if (size() > 1 && halving_doubling(input.nbytes())) halving_reduce_scatter(work, seg, op, TcpCollective::ReduceScatter, deadline);
    else if (size() > 1) ring_reduce_scatter(work, seg, op, TcpCollective::ReduceScatter, deadline);
    if (output.count > 0) std::memcpy(output.data, work.slice(seg.offsets[rank()], 0).data, output.nbytes());
  }

  void alltoall(Buffer input, Buffer output, Deadline deadline) override {
    const int p = size();
    TESSERA_CHECK(input.count == output.count && input.count % p == 0, "[tcp alltoall] rank ", rank(), ": ", input.count,
                  " elements do not split into ", p, " equal blocks");
    const int64_t block = input.count / p;
    const size_t block_bytes = static_cast<size_t>(block) * dtype_size(input.dtype);
    auto* in = static_cast<uint8_t*>(input.data);
    auto* out = static_cast<uint8_t*>(output.data);
    if (block_bytes > 0) std::memmove(out + rank() * block_bytes, in + rank() * block_bytes, block_bytes);
    for (int k = 1; k < p; ++k) {
      const int to = (rank() + k) % p, from = (rank() - k + p) % p;
      std::vector<TcpTransfer> t{send_to(to, in + to * block_bytes, block_bytes), recv_from(from, out + from * block_bytes, block_bytes)};
      run(TcpCollective::Alltoall, t, deadline);
    }
  }

  void barrier(Deadline deadline) override {
    const int p = size();
    for (int k = 1; k < p; k <<= 1) {
      std::vector<TcpTransfer> t{send_to((rank() + k) % p, nullptr, 0), recv_from((rank() - k + p) % p, nullptr, 0)};
      run(TcpCollective::Barrier, t, deadline);
    }
  }

  std::unique_ptr<PendingTransfer> post_send(Buffer data, int peer, int tag) override {
    return point_to_point_->post_send(data, peer, tag);
  }
  std::unique_ptr<PendingTransfer> post_recv(Buffer data, int peer, int tag) override {
    return point_to_point_->post_recv(data, peer, tag);
  }

  std::unique_ptr<Communicator> split(std::span<const int> ranks, std::shared_ptr<Store> store, Milliseconds timeout) override {
    const auto me = std::find(ranks.begin(), ranks.end(), rank());
    TESSERA_CHECK(me != ranks.end(), "[tcp split] rank ", rank(), " is not in the new group");
    const int new_rank = static_cast<int>(me - ranks.begin()), new_size = static_cast<int>(ranks.size());
    // The sub-group's ranks listen where this group's did (same machines, same interfaces).
    const std::string& mine = mesh_.addresses[static_cast<size_t>(rank())];
    std::string host = mine.substr(0, mine.rfind(':'));
    if (host.size() >= 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
    const detail::Clock::time_point deadline = detail::deadline_after(timeout);
    detail::TcpMesh mesh = detail::connect_tcp_mesh(*std::make_shared<PrefixStore>("collectives", store), new_rank, new_size,
                                                    host, timeout);
    auto p2p = point_to_point_->split(ranks, std::make_shared<PrefixStore>("p2p", store),
                                      std::max(Milliseconds(1), std::chrono::ceil<Milliseconds>(deadline - detail::Clock::now())));
    return std::make_unique<TcpCommunicator>(std::move(mesh), std::move(p2p));
  }

 private:
  void check_rank(int r, const char* op) const {
    TESSERA_CHECK(r >= 0 && r < size(), "[tcp ", op, "] root ", r, " is not a rank of a group of ", size());
  }
  static TcpTransfer send_to(int peer, const uint8_t* data, size_t bytes) {
    TcpTransfer t;
    t.peer = peer, t.send = true, t.data = const_cast<uint8_t*>(data), t.bytes = bytes;
    return t;
  }
  static TcpTransfer recv_from(int peer, uint8_t* data, size_t bytes) {
    TcpTransfer t;
    t.peer = peer, t.data = data, t.bytes = bytes;
    return t;
  }
  void run(TcpCollective c, std::vector<TcpTransfer>& t, Deadline deadline) {
    detail::run_transfers(mesh_, c, t, deadline, aborted_);
  }

  uint8_t* scratch(size_t bytes) {
    if (scratch_.size() < bytes) scratch_.resize(bytes);
    return scratch_.data();
  }

  // A receive whose elements are reduced into `into` as they arrive: into = op(into, received).
  TcpTransfer reducing_recv(int peer, Buffer into, ReduceOp op, bool received_first) {
    const size_t esize = dtype_size(into.dtype);
    uint8_t* landing = scratch(into.nbytes());
    TcpTransfer t = recv_from(peer, landing, into.nbytes());
    auto reduced = std::make_shared<int64_t>(0);
    t.on_progress = [=](size_t bytes_so_far) {
      const int64_t complete = static_cast<int64_t>(bytes_so_far / esize);
      if (complete < into.count && static_cast<size_t>(complete - *reduced) * esize < kReduceChunkBytes) return;
      const int64_t n = complete - *reduced;
      if (n <= 0) return;
      void* out = static_cast<uint8_t*>(into.data) + *reduced * esize;
      const void* got = landing + *reduced * esize;
      // Both sides of an exchange combine the same two partials in the same order: the same bits.
      if (received_first) reduce_pair(out, got, out, n, into.dtype, op);
      else reduce_pair(out, out, got, n, into.dtype, op);
      *reduced = complete;
    };
    return t;
  }

  void recursive_doubling(Buffer data, ReduceOp op, Deadline deadline) {
    auto* bytes = static_cast<uint8_t*>(data.data);
    for (int mask = 1; mask < size(); mask <<= 1) {
      const int peer = rank() ^ mask;
      // The lower half's partial goes first on both sides. The send reads `data` while the receive
      // reduces into it, so the send goes from a copy.
      uint8_t* copy = scratch(2 * data.nbytes()) + data.nbytes();
      std::memcpy(copy, bytes, data.nbytes());
      std::vector<TcpTransfer> t{send_to(peer, copy, data.nbytes()), reducing_recv(peer, data, op, peer < rank())};
      run(TcpCollective::Allreduce, t, deadline);
    }
  }

  // Whether a reduce-scatter or all-gather of `bytes` in all takes log2(p) steps of halving and
  // doubling rather than the ring's p-1 (tcp_communicator.h says when).
  bool halving_doubling(size_t bytes) const {
    const int p = size();
    if (!power_of_two(p) || p == 2) return false;  // at p = 2 both are one exchange
    const TcpAlgorithm a = tcp_algorithm();
    return a == TcpAlgorithm::HalvingDoubling || (a == TcpAlgorithm::Auto && bytes <= kTcpHalvingMaxBytes);
  }

  // Bytes of segments [first, last) of `data`, and where they start.
  static uint8_t* at(Buffer data, const Segments& seg, int first) {
    return static_cast<uint8_t*>(data.data) + seg.begin(first) * dtype_size(data.dtype);
  }
  static size_t span_bytes(Buffer data, const Segments& seg, int first, int last) {
    return static_cast<size_t>(seg.begin(last) - seg.begin(first)) * dtype_size(data.dtype);
  }

  // Reduce-scatter by recursive halving, in place over `data` (p a power of two): at the step of
  // distance d = p/2, p/4, ..., 1 a rank sends the half of its segments that rank^d keeps and reduces
  // rank^d's copy of the half it keeps itself. Afterwards rank r holds segment r reduced over all
  // ranks, as after the ring. The lower rank's partial goes first in every combination, so a segment
  // is the same sum tree whichever rank reduces it.
  void halving_reduce_scatter(Buffer data, const Segments& seg, ReduceOp op, TcpCollective c, Deadline deadline) {
    int first = 0, last = size();
    for (int distance = size() / 2; distance >= 1; distance /= 2) {
      const int peer = rank() ^ distance, middle = first + (last - first) / 2;
      const bool keep_lower = (rank() & distance) == 0;
      const int keep_first = keep_lower ? first : middle, keep_last = keep_lower ? middle : last;
      const int give_first = keep_lower ? middle : first, give_last = keep_lower ? last : middle;
      std::vector<TcpTransfer> t{
          send_to(peer, at(data, seg, give_first), span_bytes(data, seg, give_first, give_last)),
          reducing_recv(peer, data.slice(seg.begin(keep_first), seg.begin(keep_last) - seg.begin(keep_first)), op, peer < rank())};
      run(c, t, deadline);
      first = keep_first, last = keep_last;
    }
  }

  // All-gather by recursive doubling, in place over `data`, rank r starting with segment r (p a power
  // of two): at the step of distance d = 1, 2, ..., p/2 a rank swaps the d segments it holds with
  // rank^d's d neighbouring ones.
  void doubling_allgather(Buffer data, const Segments& seg, TcpCollective c, Deadline deadline) {
    int first = rank();
    for (int distance = 1; distance < size(); distance *= 2) {
      const int peer = rank() ^ distance, peer_first = first ^ distance;
      std::vector<TcpTransfer> t{send_to(peer, at(data, seg, first), span_bytes(data, seg, first, first + distance)),
                                 recv_from(peer, at(data, seg, peer_first), span_bytes(data, seg, peer_first, peer_first + distance))};
      run(c, t, deadline);
      first = std::min(first, peer_first);
    }
  }

  // Ring reduce-scatter in place over `data`: afterwards rank r holds segment r reduced over all ranks.
  void ring_reduce_scatter(Buffer data, const Segments& seg, ReduceOp op, TcpCollective c, Deadline deadline) {
    const int p = size(), right = (rank() + 1) % p, left = (rank() - 1 + p) % p;
    const size_t esize = dtype_size(data.dtype);
    for (int s = 0; s < p - 1; ++s) {
      const int out_seg = ((rank() - s - 1) % p + p) % p, in_seg = ((rank() - s - 2) % p + p) % p;
      std::vector<TcpTransfer> t{
          send_to(right, static_cast<uint8_t*>(data.data) + seg.offsets[out_seg] * esize, seg.counts[out_seg] * esize),
          reducing_recv(left, data.slice(seg.offsets[in_seg], seg.counts[in_seg]), op, false)};
      run(c, t, deadline);
    }
  }

  // Ring all-gather in place over `data`, rank r starting with segment r.
  void ring_allgather(Buffer data, const Segments& seg, TcpCollective c, Deadline deadline) {
    const int p = size(), right = (rank() + 1) % p, left = (rank() - 1 + p) % p;
    const size_t esize = dtype_size(data.dtype);
    auto* bytes = static_cast<uint8_t*>(data.data);
    for (int s = 0; s < p - 1; ++s) {
      const int out_seg = ((rank() - s) % p + p) % p, in_seg = ((rank() - s - 1) % p + p) % p;
      std::vector<TcpTransfer> t{send_to(right, bytes + seg.offsets[out_seg] * esize, seg.counts[out_seg] * esize),
                                 recv_from(left, bytes + seg.offsets[in_seg] * esize, seg.counts[in_seg] * esize)};
      run(c, t, deadline);
    }
  }

  detail::TcpMesh mesh_;
  std::unique_ptr<Communicator> point_to_point_;
  std::vector<uint8_t> scratch_, work_;
  std::atomic<bool> aborted_{false};
};

}  // namespace

TcpAlgorithm tcp_algorithm() {
  static const TcpAlgorithm algorithm = [] {
    const char* v = env_setting("TESSERA_TCP_ALGORITHM");
    const std::string name = v == nullptr ? "auto" : v;
    if (name == "auto") return TcpAlgorithm::Auto;
    if (name == "ring") return TcpAlgorithm::Ring;
    if (name == "halving-doubling") return TcpAlgorithm::HalvingDoubling;
    throw Error(concat("TESSERA_TCP_ALGORITHM is '", name, "': it must be auto, ring or halving-doubling"));
  }();
  return algorithm;
}

std::unique_ptr<Communicator> make_tcp_communicator(const BackendContext& context) {
  const detail::Clock::time_point deadline = detail::deadline_after(context.timeout);
  BackendContext gloo = context;
  gloo.store = std::make_shared<PrefixStore>("p2p", context.store);
  PrefixStore collectives("collectives", context.store);
  const std::string host = context.bind_host.empty() ? detail::tcp_bind_host(context.local_size, context.size) : context.bind_host;
  detail::TcpMesh mesh = detail::connect_tcp_mesh(collectives, context.rank, context.size, host, context.timeout);
  gloo.timeout = std::max(Milliseconds(1), std::chrono::ceil<Milliseconds>(deadline - detail::Clock::now()));
  return std::make_unique<TcpCommunicator>(std::move(mesh), make_gloo_communicator(gloo));
}

}  // namespace tessera::dist
