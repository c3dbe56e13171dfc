// ShmCommunicator's setup (rendezvous, segment layout), split, and point-to-point (handed to
// shm_point_to_point.h). The collectives are in shm_collectives.cpp.
#include "tessera/dist/backends/shm/shm_communicator.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <new>
#include <sstream>

#include "tessera/core/error.h"
#include "tessera/util/settings.h"

namespace tessera::dist {

using tessera::detail::concat;

namespace {

constexpr uint64_t kMagic = 0x74657373'73686d31ull;  // "tesshm1"
constexpr size_t kPage = 4096;

// Bytes each slot buffer holds, i.e. how much of a tensor one round moves. Measured on this 2-core
// machine (busbw of float32 allreduce, DISABLED_ShmTiming in tests/dist/backends), 64 MiB:
// 2 processes 2.4 / 2.6 / 2.4 GB/s at 1 / 2 / 4 MiB chunks, 4 processes 1.8 / 1.6 / 1.3 GB/s;
// 256 KiB chunks cost 1.7x at 1 MiB (more rounds, each a handshake). 1 MiB keeps the segment at
// 3 MiB per rank. TESSERA_SHM_CHUNK_BYTES overrides it (read on rank 0, which tells the others).
constexpr size_t kDefaultChunkBytes = size_t(1) << 20;

struct ShmHeader {
  uint64_t magic;
  uint64_t size;
  uint64_t chunk_bytes;
  uint64_t ring_bytes;
};

size_t round_up(size_t x, size_t to) { return (x + to - 1) / to * to; }

size_t counters_offset() { return kPage; }
size_t slots_offset(int size) { return counters_offset() + round_up(sizeof(detail::ShmCounter) * size, kPage); }
size_t point_to_point_offset(int size, size_t chunk_bytes, size_t buffers) {
  return round_up(slots_offset(size) + buffers * size * chunk_bytes, kPage);
}
size_t segment_bytes(int size, size_t chunk_bytes, size_t buffers, size_t ring_bytes) {
  return point_to_point_offset(size, chunk_bytes, buffers) + detail::shm_point_to_point_bytes(size, ring_bytes);
}

size_t choose_chunk_bytes(int size) {
  const auto chunk = static_cast<size_t>(env_int("TESSERA_SHM_CHUNK_BYTES", static_cast<int64_t>(kDefaultChunkBytes)));
  // Whole pages, and at least 64 bytes per rank so that every rank's share of a round is a
  // cache-line multiple (shm_collectives.cpp splits rounds on 64-byte boundaries).
  return round_up(std::max<size_t>(chunk, size_t(64) * size), kPage);
}

std::string read_first_line(const char* path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

void check_one_machine(Store& store, int rank, int size, Milliseconds timeout) {
  store.set(concat("shm/machine/", rank), detail::machine_identity());
  std::vector<std::string> keys;
  for (int r = 0; r < size; ++r) keys.push_back(concat("shm/machine/", r));
  store.wait(keys, timeout);
  std::string mine = detail::machine_identity();
  for (int r = 0; r < size; ++r) {
    std::string theirs = store.get_string(keys[static_cast<size_t>(r)]);
    if (theirs != mine) {
      throw ValueError(concat("[init_process_group] backend shm needs every rank on one machine, but rank ", rank,
                              " runs on '", mine, "' and rank ", r, " on '", theirs, "'; use backend gloo or auto"));
    }
  }
}

}  // namespace

namespace detail {

// Two processes share /dev/shm only on the same host (and kernel boot); the hostname alone can
// repeat across containers of different machines, the boot id does not.
std::string machine_identity() {
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  return concat(host, " boot ", read_first_line("/proc/sys/kernel/random/boot_id"));
}

}  // namespace detail

ShmCommunicator::ShmCommunicator(const BackendContext& context) : rank_(context.rank), size_(context.size) {
  TESSERA_CHECK(context.store != nullptr, "[init_process_group] backend shm needs a store");
  TESSERA_CHECK(size_ >= 1 && rank_ >= 0 && rank_ < size_, "[init_process_group] rank ", rank_,
                " is not in a group of ", size_);
  if (context.local_size != 0 && context.local_size != size_) {
    throw ValueError(concat("[init_process_group] backend shm needs every rank on one machine: rank ", rank_,
                            " shares its machine with ", context.local_size, " of the group's ", size_,
                            " ranks; use backend gloo or auto"));
  }
  if (size_ == 1) return;  // every collective is a local copy; no segment needed
  Store& store = *context.store;
  const Milliseconds timeout = context.timeout;
  if (context.local_size == 0) check_one_machine(store, rank_, size_, timeout);

  // The segment has no name (memfd): rank 0 keeps its descriptor open until every rank has opened
  // it through /proc/<pid>/fd, so a rank killed during setup leaves nothing in /dev/shm (named
  // segments unlinked only after setup were left there by jobs killed in between).
  std::string name;
  size_t ring_bytes = 0;
  if (rank_ == 0) {
    chunk_bytes_ = choose_chunk_bytes(size_);
    ring_bytes = detail::choose_ring_bytes(size_);
    segment_ = detail::ShmSegment::create_unnamed(segment_bytes(size_, chunk_bytes_, kBuffers, ring_bytes));
    name = segment_.peer_path();
    new (segment_.data()) ShmHeader{kMagic, static_cast<uint64_t>(size_), chunk_bytes_, ring_bytes};
    for (int r = 0; r < size_; ++r) new (segment_.data() + counters_offset() + r * sizeof(detail::ShmCounter)) detail::ShmCounter();
    detail::ShmPointToPoint::initialise(segment_.data() + point_to_point_offset(size_, chunk_bytes_, kBuffers), size_);
    store.set("shm/segment", concat(chunk_bytes_, " ", ring_bytes, " ", name));
  } else {
    store.wait({"shm/segment"}, timeout);
    std::istringstream in(store.get_string("shm/segment"));
    in >> chunk_bytes_ >> ring_bytes >> name;
    TESSERA_ASSERT(chunk_bytes_ > 0 && ring_bytes > 0 && !name.empty(), "bad shm/segment value in the store");
    segment_ = detail::ShmSegment::open_path(name, segment_bytes(size_, chunk_bytes_, kBuffers, ring_bytes));
    const auto* header = reinterpret_cast<const ShmHeader*>(segment_.data());
    TESSERA_ASSERT(header->magic == kMagic && header->size == static_cast<uint64_t>(size_) &&
                       header->chunk_bytes == chunk_bytes_ && header->ring_bytes == ring_bytes,
                   "shm segment ", name, " does not match its description in the store");
  }

  // Everyone has mapped the segment once every ready key exists; then rank 0's descriptor can
  // close (or goes with segment_ if this throws). The pids let a waiting rank tell a slow peer from
  // a dead one (shm_sync.cpp).
  std::vector<pid_t> pids(static_cast<size_t>(size_));
  store.set(concat("shm/ready/", rank_), std::to_string(getpid()));
  std::vector<std::string> keys;
  for (int r = 0; r < size_; ++r) keys.push_back(concat("shm/ready/", r));
  store.wait(keys, timeout);
  for (int r = 0; r < size_; ++r) pids[static_cast<size_t>(r)] = std::stoi(store.get_string(keys[static_cast<size_t>(r)]));
  segment_.close_descriptor();

  auto* counters = reinterpret_cast<detail::ShmCounter*>(segment_.data() + counters_offset());
  point_to_point_ = std::make_shared<detail::ShmPointToPoint>(
      segment_.data() + point_to_point_offset(size_, chunk_bytes_, kBuffers), ring_bytes, rank_, size_, pids);
  sync_ = std::make_unique<detail::ShmSync>(counters, rank_, size_, std::move(pids));
  sync_->set_idle_hook([p2p = point_to_point_.get()] { p2p->progress_if_idle(); });
  slots_ = segment_.data() + slots_offset(size_);
}

char* ShmCommunicator::slot(int rank, uint64_t round) const {
  return slots_ + (size_t{kBuffers} * static_cast<size_t>(rank) + static_cast<size_t>(round % kBuffers)) * chunk_bytes_;
}

uint64_t ShmCommunicator::begin_round(const char* op, Deadline deadline, uint64_t read_lag) {
  uint64_t round = round_++;
  uint64_t& reusable = reusable_at_[round % kBuffers];
  sync_->wait(static_cast<uint32_t>(reusable), op, deadline);  // usually true already
  reusable = round + read_lag;
  return round;
}

void ShmCommunicator::arrive_and_wait(uint64_t k, const char* op, Deadline deadline, int only_peer) {
  sync_->publish(static_cast<uint32_t>(k + 1));
  sync_->wait(static_cast<uint32_t>(k + 1), op, deadline, only_peer);
}

std::unique_ptr<PendingTransfer> ShmCommunicator::post_send(Buffer data, int peer, int tag) {
  TESSERA_CHECK(point_to_point_, "[shm send] rank ", rank_, " to rank ", peer, ": a group of one has no peer");
  return point_to_point_->post_send(data, peer, tag);
}

std::unique_ptr<PendingTransfer> ShmCommunicator::post_recv(Buffer data, int peer, int tag) {
  TESSERA_CHECK(point_to_point_, "[shm recv] rank ", rank_, " from rank ", peer, ": a group of one has no peer");
  return point_to_point_->post_recv(data, peer, tag);
}

std::unique_ptr<Communicator> ShmCommunicator::split(std::span<const int> ranks, std::shared_ptr<Store> store,
                                                     Milliseconds timeout) {
  auto me = std::find(ranks.begin(), ranks.end(), rank_);
  TESSERA_CHECK(me != ranks.end(), "[new_group] rank ", rank_, " is not among the ranks of the new group");
  BackendContext sub;
  sub.store = std::move(store);
  sub.rank = static_cast<int>(me - ranks.begin());
  sub.size = static_cast<int>(ranks.size());
  sub.local_size = sub.size;  // a subgroup of a one-machine group is on this machine too
  sub.timeout = timeout;
  return std::make_unique<ShmCommunicator>(sub);
}

std::unique_ptr<Communicator> make_shm_communicator(const BackendContext& context) {
  return std::make_unique<ShmCommunicator>(context);
}

}  // namespace tessera::dist
