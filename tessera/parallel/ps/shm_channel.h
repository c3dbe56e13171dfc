// ShmChannel: the bulk half of a worker's connections to the parameter servers that run on its
// machine. The worker's dense gradients and the servers' dense values then go through one
// shared-memory segment instead of the TCP connections, which carry only the small frames that say
// when (protocol.h: kAttachShm, kPushShm, kPullShm, kValuesInShm).
//
// Why: over loopback TCP every dense value is copied eight times a step (into the frame, into the
// kernel, out of it, out of the frame, each way). Through the segment the server reads the
// gradients once (its sum) and writes the values once. The worker's parameters and gradients live
// in the segment itself (PsWorker::bind_to_shared_memory): backward writes the gradients there (a
// linear layer's weight product straight there, others with one copy) and forward reads the values
// from there, so pushing and pulling copy nothing on the worker's side. `tessera bench ps`
// (docs/benchmarks.md) has the figures.
//
// The contract, in one place:
//   - the worker creates one segment (ShmSegment: a fresh random name, mode 0600) for the whole
//     model, writes the header and sends kAttachShm to each server that holds dense pieces, with
//     the name, the size, the nonce and that server's dense pieces in its order, each with its
//     offset in the dense layout; the server maps it, checks the size, the header and that the
//     pieces and offsets are exactly its own under the shard plan (ShardPlan::piece_offset), and
//     answers kAttached (attached or not, and why). The worker then unlinks the name either way:
//     nothing is left in /dev/shm.
//   - layout: a 64-byte header (u64 kShmChannelMagic, 16-byte nonce, i64 dense floats D: every
//     dense parameter of the model, ShardPlan::dense_elements), then the push region (D floats: the
//     gradients, in the plan's dense layout), then the pull region (D floats: the values, same
//     layout). Each server reads and writes only its own pieces, so servers never share a byte.
//   - a server's pieces of the push region are written by the worker (its backward, or a copy)
//     before it sends kPushShm and read by the server while it handles that frame; its pieces of
//     the pull region are written by the server before it sends kValuesInShm and read by the worker
//     only after it received every server's reply (the worker's forward reads them as parameters).
//     Requests and replies of one connection alternate, and a send/receive pair orders the memory
//     (the kernel's socket lock), so neither side ever touches bytes the other is using.
//   - a worker whose exchange failed (an error reply, a timeout) stops training: a server that
//     answers its held pull later still writes that worker's parameters.
//   - the workers are trusted here as over TCP (they hold the job token and run as the same user):
//     one that shrank its segment after the attach (ftruncate) would make the server's next
//     access fault.
//   - a server on another machine cannot open the name (or finds another segment under it: the
//     nonce differs), so the pair falls back to sending the values over TCP.
#pragma once
#include <array>
#include <cstdint>
#include <string>

#include "tessera/dist/backends/shm/shm_segment.h"

namespace tessera::parallel::ps {

constexpr uint64_t kShmChannelMagic = 0x314d485353505354ULL;  // "TSPSSHM1"
constexpr size_t kShmChannelHeaderBytes = 64;
using ShmNonce = std::array<uint8_t, 16>;

class ShmChannel {
 public:
  ShmChannel() = default;
  // The worker's side: a new segment for `dense` floats each way (the whole model's), with a random nonce.
  static ShmChannel create(int64_t dense);
  // The server's side: maps `name` and checks its size and header. IoError saying why not.
  static ShmChannel open(const std::string& name, size_t bytes, int64_t dense, const ShmNonce& nonce);
  static size_t bytes_for(int64_t dense) { return kShmChannelHeaderBytes + 2 * static_cast<size_t>(dense) * sizeof(float); }

  bool attached() const { return segment_.data() != nullptr; }
  const std::string& name() const { return segment_.name(); }
  size_t bytes() const { return segment_.size(); }
  int64_t dense() const { return dense_; }
  const ShmNonce& nonce() const { return nonce_; }
  float* push_region() const { return reinterpret_cast<float*>(segment_.data() + kShmChannelHeaderBytes); }
  float* pull_region() const { return push_region() + dense_; }

 private:
  dist::detail::ShmSegment segment_;
  int64_t dense_ = 0;
  ShmNonce nonce_{};
};

}  // namespace tessera::parallel::ps
