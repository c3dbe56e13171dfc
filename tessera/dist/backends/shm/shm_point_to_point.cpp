#include "tessera/dist/backends/shm/shm_point_to_point.h"

#include <immintrin.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>

#include "tessera/core/error.h"
#include "tessera/util/settings.h"

namespace tessera::dist::detail {

using tessera::detail::concat;

namespace {

constexpr size_t kRingPage = 4096;
constexpr size_t kMessageHeaderBytes = 16;
constexpr auto kP2pWaitSlice = std::chrono::milliseconds(20);  // as ShmSync's: the deadline and liveness checks
constexpr int kMaxP2pSpin = 4000;

size_t round_up_to(size_t x, size_t to) { return (x + to - 1) / to * to; }

// One ring per ordered pair of different ranks: size·(size-1) of them, none from a rank to itself.
size_t ring_count(int size) { return static_cast<size_t>(size) * static_cast<size_t>(size - 1); }
size_t pair_index(int src, int dst, int size) {
  return static_cast<size_t>(src) * static_cast<size_t>(size - 1) + static_cast<size_t>(dst < src ? dst : dst - 1);
}

size_t doorbells_bytes(int size) { return round_up_to(sizeof(ShmCounter) * static_cast<size_t>(size), kRingPage); }
size_t positions_bytes(int size) { return round_up_to(sizeof(ShmRingPositions) * ring_count(size), kRingPage); }

// Copies between a ring and flat memory, `position` counting bytes ever written (it wraps).
void copy_into_ring(char* ring, size_t ring_bytes, uint64_t position, const char* from, size_t n) {
  const size_t at = static_cast<size_t>(position % ring_bytes), first = std::min(n, ring_bytes - at);
  std::memcpy(ring + at, from, first);
  if (n > first) std::memcpy(ring, from + first, n - first);
}

void copy_from_ring(const char* ring, size_t ring_bytes, uint64_t position, char* to, size_t n) {
  const size_t at = static_cast<size_t>(position % ring_bytes), first = std::min(n, ring_bytes - at);
  if (to != nullptr) {
    std::memcpy(to, ring + at, first);
    if (n > first) std::memcpy(to + first, ring, n - first);
  }
}

}  // namespace

struct ShmPointToPoint::SendState {
  const char* data = nullptr;  // payload byte `data_from` onwards
  uint64_t data_from = 0;
  uint64_t bytes = 0;
  int tag = 0;
  uint64_t written = 0;  // header and payload bytes in the ring so far
  bool complete = false;
  std::vector<char> owned;  // the unsent rest, when the caller abandoned the transfer
};

struct ShmPointToPoint::Unexpected {
  int tag = 0;
  std::vector<char> data;
  bool complete = false;
};

struct ShmPointToPoint::RecvState {
  char* data = nullptr;
  uint64_t bytes = 0;
  int tag = 0;
  bool complete = false;
  bool abandoned = false;
  std::string error;                        // set when the message does not fit
  std::shared_ptr<Unexpected> from;         // matched to a message that arrived before the recv
};

size_t shm_point_to_point_bytes(int size, size_t ring_bytes) {
  return doorbells_bytes(size) + positions_bytes(size) + ring_count(size) * ring_bytes;
}

size_t choose_ring_bytes(int size) {
  // The registry's lower bound is one ring page (kRingPage).
  if (const int64_t bytes = env_int("TESSERA_SHM_RING_BYTES", 0); bytes > 0)
    return round_up_to(static_cast<size_t>(bytes), kRingPage);
  // The segment's pages are reserved up front in /dev/shm (often 64 MiB in a container), and a mesh
  // job makes a group per line of each axis, so the rings share 8 MiB. A message larger than its
  // ring streams through it.
  const size_t pairs = static_cast<size_t>(std::max(1, size * (size - 1)));
  const size_t share = (size_t(8) << 20) / pairs;
  return std::clamp(share / kRingPage * kRingPage, size_t(64) << 10, size_t(1) << 20);
}

void ShmPointToPoint::initialise(char* area, int size) {
  for (int r = 0; r < size; ++r) new (area + sizeof(ShmCounter) * static_cast<size_t>(r)) ShmCounter();
  char* positions = area + doorbells_bytes(size);
  for (size_t i = 0; i < ring_count(size); ++i) new (positions + sizeof(ShmRingPositions) * i) ShmRingPositions();
}

ShmPointToPoint::ShmPointToPoint(char* area, size_t ring_bytes, int rank, int size, std::vector<pid_t> pids)
    : area_(area), ring_bytes_(ring_bytes), rank_(rank), size_(size), pids_(std::move(pids)),
      peers_(static_cast<size_t>(size)) {}

ShmPointToPoint::~ShmPointToPoint() = default;

ShmRingPositions& ShmPointToPoint::positions(int src, int dst) const {
  auto* all = reinterpret_cast<ShmRingPositions*>(area_ + doorbells_bytes(size_));
  return all[pair_index(src, dst, size_)];
}

char* ShmPointToPoint::ring(int src, int dst) const {
  return area_ + doorbells_bytes(size_) + positions_bytes(size_) + pair_index(src, dst, size_) * ring_bytes_;
}

ShmCounter& ShmPointToPoint::doorbell(int rank) const {
  return reinterpret_cast<ShmCounter*>(area_)[static_cast<size_t>(rank)];
}

void ShmPointToPoint::ring_doorbell(int rank) {
  ShmCounter& bell = doorbell(rank);
  // seq_cst against the sleeper's increment, as ShmSync::publish: it sees the bump or we see it.
  bell.value.fetch_add(1, std::memory_order_seq_cst);
  if (bell.sleepers.load(std::memory_order_seq_cst) != 0) shm_futex_wake_all(&bell.value);
}

// ---- progress, with mu_ held --------------------------------------------------------------------

void ShmPointToPoint::push_sends(int peer) {
  Peer& p = peers_[static_cast<size_t>(peer)];
  if (p.sends.empty()) return;
  ShmRingPositions& pos = positions(rank_, peer);
  char* r = ring(rank_, peer);
  uint64_t head = pos.head.load(std::memory_order_relaxed);  // ours alone
  const uint64_t start = head;
  while (!p.sends.empty()) {
    SendState& s = *p.sends.front();
    const uint64_t free = ring_bytes_ - (head - pos.tail.load(std::memory_order_acquire));
    if (s.written == 0) {
      if (free < kMessageHeaderBytes) break;
      char header[kMessageHeaderBytes];
      const uint32_t magic = kShmMessageMagic;
      const int32_t tag = s.tag;
      std::memcpy(header, &magic, 4);
      std::memcpy(header + 4, &tag, 4);
      std::memcpy(header + 8, &s.bytes, 8);
      copy_into_ring(r, ring_bytes_, head, header, kMessageHeaderBytes);
      head += kMessageHeaderBytes;
      s.written = kMessageHeaderBytes;
      continue;
    }
    const uint64_t sent = s.written - kMessageHeaderBytes, n = std::min(free, s.bytes - sent);
    if (n > 0) {
      copy_into_ring(r, ring_bytes_, head, s.data + (sent - s.data_from), static_cast<size_t>(n));
      head += n;
      s.written += n;
    }
    if (s.written - kMessageHeaderBytes < s.bytes) break;  // the ring is full
    s.complete = true;
    p.sends.pop_front();
  }
  if (head == start) return;
  pos.head.store(head, std::memory_order_release);
  ring_doorbell(peer);  // data for the receiver
}

void ShmPointToPoint::pull_messages(int peer) {
  Peer& p = peers_[static_cast<size_t>(peer)];
  ShmRingPositions& pos = positions(peer, rank_);
  const char* r = ring(peer, rank_);
  uint64_t tail = pos.tail.load(std::memory_order_relaxed);  // ours alone
  const uint64_t start = tail;
  uint64_t available = pos.head.load(std::memory_order_acquire) - tail;
  Incoming& in = p.incoming;
  while (available > 0) {
    if (!in.active) {
      if (available < kMessageHeaderBytes) break;  // the sender writes a header whole; not there yet
      char header[kMessageHeaderBytes];
      copy_from_ring(r, ring_bytes_, tail, header, kMessageHeaderBytes);
      uint32_t magic = 0;
      int32_t tag = 0;
      uint64_t bytes = 0;
      std::memcpy(&magic, header, 4);
      std::memcpy(&tag, header + 4, 4);
      std::memcpy(&bytes, header + 8, 8);
      if (magic != kShmMessageMagic)
        throw IoError(concat("[shm recv] rank ", rank_, " from rank ", peer, ": the ring holds a message header with ",
                             "magic ", magic, " instead of ", kShmMessageMagic, " (shared memory overwritten)"));
      tail += kMessageHeaderBytes;
      available -= kMessageHeaderBytes;
      in = Incoming{true, tag, bytes, 0, nullptr, nullptr};
      // The first posted recv of this tag takes it; otherwise it waits aside for one.
      for (auto it = p.recvs.begin(); it != p.recvs.end(); ++it) {
        if ((*it)->tag != tag) continue;
        in.recv = *it;
        p.recvs.erase(it);
        if (in.recv->bytes != bytes) in.recv->error = size_mismatch(peer, tag, bytes, in.recv->bytes);
        break;
      }
      if (!in.recv) {
        in.unexpected = std::make_shared<Unexpected>();
        in.unexpected->tag = tag;
        in.unexpected->data.resize(static_cast<size_t>(bytes));
        p.unexpected.push_back(in.unexpected);
      }
    }
    const uint64_t n = std::min(available, in.bytes - in.got);
    char* to = nullptr;
    if (in.unexpected) to = in.unexpected->data.data() + in.got;
    else if (in.recv->error.empty() && !in.recv->abandoned) to = in.recv->data + in.got;
    copy_from_ring(r, ring_bytes_, tail, to, static_cast<size_t>(n));  // null: dropped
    tail += n;
    available -= n;
    in.got += n;
    if (in.got < in.bytes) break;
    if (in.unexpected) in.unexpected->complete = true;
    else in.recv->complete = true;
    in = Incoming{};
  }
  if (tail == start) return;
  pos.tail.store(tail, std::memory_order_release);
  ring_doorbell(peer);  // space for the sender
}

std::string ShmPointToPoint::describe(const char* op, int peer, int tag) const {
  return concat("[shm ", op, "] rank ", rank_, op[0] == 's' ? " to rank " : " from rank ", peer, " (tag ", tag, ")");
}

std::string ShmPointToPoint::size_mismatch(int peer, int tag, uint64_t message_bytes, uint64_t buffer_bytes) const {
  return concat(describe("recv", peer, tag), ": the message holds ", message_bytes, " bytes but the receive buffer ",
                buffer_bytes);
}

void ShmPointToPoint::complete_bound_recvs(int peer) {
  Peer& p = peers_[static_cast<size_t>(peer)];
  for (auto it = p.bound.begin(); it != p.bound.end();) {
    RecvState& recv = **it;
    if (!recv.from->complete) {
      ++it;
      continue;
    }
    if (recv.from->data.size() != recv.bytes)
      recv.error = size_mismatch(peer, recv.tag, recv.from->data.size(), recv.bytes);
    else if (!recv.abandoned && recv.bytes > 0)
      std::memcpy(recv.data, recv.from->data.data(), static_cast<size_t>(recv.bytes));
    recv.from.reset();
    recv.complete = true;
    it = p.bound.erase(it);
  }
}

void ShmPointToPoint::progress() {
  for (int peer = 0; peer < size_; ++peer) {
    if (peer == rank_) continue;
    push_sends(peer);
    pull_messages(peer);
    complete_bound_recvs(peer);
  }
}

void ShmPointToPoint::progress_if_idle() {
  std::unique_lock lock(mu_, std::try_to_lock);
  if (lock.owns_lock()) progress();
}

// ---- transfers ------------------------------------------------------------------------------------

// Holds its engine weakly: a transfer that outlives its communicator can only report that.
class ShmPointToPoint::Transfer final : public PendingTransfer {
 public:
  Transfer(std::weak_ptr<ShmPointToPoint> owner, int peer, std::shared_ptr<SendState> send)
      : owner_(std::move(owner)), peer_(peer), send_(std::move(send)) {}
  Transfer(std::weak_ptr<ShmPointToPoint> owner, int peer, std::shared_ptr<RecvState> recv)
      : owner_(std::move(owner)), peer_(peer), recv_(std::move(recv)) {}
  ~Transfer() override {
    if (auto owner = owner_.lock()) {
      if (send_) owner->abandon(send_);
      if (recv_) owner->abandon(peer_, recv_);
    }
  }

  void wait(Deadline deadline) override {
    auto owner = owner_.lock();
    const char* op = send_ ? "send" : "recv";
    if (!owner)
      throw Error(concat("[shm ", op, "] peer rank ", peer_, ": the communicator was destroyed before the wait"));
    if (send_) {
      owner->wait_until([this] { return send_->complete; }, op, peer_, send_->tag, deadline);
      return;
    }
    owner->wait_until([this] { return recv_->complete; }, op, peer_, recv_->tag, deadline);
    if (!recv_->error.empty()) throw ValueError(recv_->error);
  }

 private:
  std::weak_ptr<ShmPointToPoint> owner_;
  int peer_;
  std::shared_ptr<SendState> send_;
  std::shared_ptr<RecvState> recv_;
};

std::unique_ptr<PendingTransfer> ShmPointToPoint::post_send(Buffer data, int peer, int tag) {
  TESSERA_CHECK(peer >= 0 && peer < size_ && peer != rank_, "[shm send] rank ", rank_, ": peer ", peer,
                " is not another rank of the group of ", size_);
  auto send = std::make_shared<SendState>();
  send->data = static_cast<const char*>(data.data);
  send->bytes = data.nbytes();
  send->tag = tag;
  std::lock_guard lock(mu_);
  peers_[static_cast<size_t>(peer)].sends.push_back(send);
  progress();  // eager: a message that fits the ring is there before this returns
  return std::make_unique<Transfer>(weak_from_this(), peer, send);
}

std::unique_ptr<PendingTransfer> ShmPointToPoint::post_recv(Buffer data, int peer, int tag) {
  TESSERA_CHECK(peer >= 0 && peer < size_ && peer != rank_, "[shm recv] rank ", rank_, ": peer ", peer,
                " is not another rank of the group of ", size_);
  auto recv = std::make_shared<RecvState>();
  recv->data = static_cast<char*>(data.data);
  recv->bytes = data.nbytes();
  recv->tag = tag;
  std::lock_guard lock(mu_);
  Peer& p = peers_[static_cast<size_t>(peer)];
  auto aside = std::find_if(p.unexpected.begin(), p.unexpected.end(), [&](const auto& u) { return u->tag == tag; });
  if (aside != p.unexpected.end()) {  // it came first
    recv->from = *aside;
    p.unexpected.erase(aside);
    p.bound.push_back(recv);
  } else {
    p.recvs.push_back(recv);
  }
  progress();
  return std::make_unique<Transfer>(weak_from_this(), peer, recv);
}

template <typename Done>
void ShmPointToPoint::wait_until(const Done& done, const char* op, int peer, int tag, Deadline deadline) {
  ShmCounter& bell = doorbell(rank_);
  for (;;) {
    const uint32_t rung = bell.value.load(std::memory_order_acquire);
    {
      std::lock_guard lock(mu_);
      progress();
      if (done()) return;
    }
    // Nothing to do until a peer moves bytes: spin a little, then sleep on the doorbell.
    bool changed = false;
    const int budget = spin_.load(std::memory_order_relaxed);
    for (int i = 0; i < budget && !changed; ++i) {
      _mm_pause();
      changed = bell.value.load(std::memory_order_acquire) != rung;
    }
    // Adapted as ShmSync's: doubled when spinning sufficed, halved when the wait had to sleep.
    spin_.store(changed ? std::min(kMaxP2pSpin, 2 * budget) : std::max(32, budget / 2), std::memory_order_relaxed);
    if (changed) continue;
    const auto now = Clock::now();
    if (now >= deadline)
      throw TimeoutError(concat(describe(op, peer, tag), " timed out: the peer did not ",
                                op[0] == 's' ? "drain" : "send", " it in time"));
    const auto slice = std::min<std::chrono::nanoseconds>(deadline - now, kP2pWaitSlice);
    bell.sleepers.fetch_add(1, std::memory_order_seq_cst);
    shm_futex_wait(&bell.value, rung, slice);
    bell.sleepers.fetch_sub(1, std::memory_order_seq_cst);
    if (bell.value.load(std::memory_order_acquire) == rung && Clock::now() - now >= kP2pWaitSlice) {
      const pid_t pid = pids_[static_cast<size_t>(peer)];
      if (pid != getpid() && !shm_process_alive(pid))
        throw PeerFailureError(concat(describe(op, peer, tag), ": peer rank ", peer, " (pid ", pid, ") has exited"));
    }
  }
}

void ShmPointToPoint::abandon(const std::shared_ptr<SendState>& send) {
  std::lock_guard lock(mu_);
  if (send->complete) return;
  // The ring may hold its start: keep the rest alive in our own copy, so the message still goes out whole.
  const uint64_t sent = send->written > kMessageHeaderBytes ? send->written - kMessageHeaderBytes : 0;
  send->owned.assign(send->data + (sent - send->data_from), send->data + (send->bytes - send->data_from));
  send->data = send->owned.data();
  send->data_from = sent;
}

void ShmPointToPoint::abandon(int peer, const std::shared_ptr<RecvState>& recv) {
  std::lock_guard lock(mu_);
  if (recv->complete) return;
  // Not matched yet: withdrawn, so the message goes to the next recv of its tag. Matched: what still
  // arrives for it is dropped, not written to memory the caller frees.
  peers_[static_cast<size_t>(peer)].recvs.remove(recv);
  recv->abandoned = true;
}

}  // namespace tessera::dist::detail
