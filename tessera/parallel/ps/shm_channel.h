// ShmChannel: the bulk half of one worker's connection to one parameter server when both run on
// the same machine. The worker's dense gradients and the server's dense values then go through a
// shared-memory segment instead of the TCP connection, which carries only the small frames that
// say when (protocol.h: kAttachShm, kPushShm, kPullShm, kValuesInShm).
//
// Why: over loopback TCP every dense value is copied eight times a step (into the frame, into the
// kernel, out of it, out of the frame, each way). Through the segment it is copied three times: the
// worker writes its gradients in, the server sums them from there and writes the values in, the
// worker copies them into its parameters. `tessera bench ps` (docs/benchmarks.md) has the figures.
//
// The contract, in one place:
//   - the worker creates the segment (ShmSegment: a fresh random name, mode 0600), writes the
//     header and sends kAttachShm with the name, the size, the nonce and the dense pieces it will
//     put there in order; the server maps it, checks the size, the header and that the pieces are
//     exactly its own dense pieces in its order, and answers kAttached (attached or not, and why).
//     The worker then unlinks the name either way: nothing is left in /dev/shm.
//   - layout: a 64-byte header (u64 kShmChannelMagic, 16-byte nonce, i64 dense floats D), then the
//     push region (D floats: the gradients of the server's dense pieces, in its order), then the
//     pull region (D floats: their values).
//   - the push region is written by the worker before it sends kPushShm and read by the server
//     while it handles that frame; the pull region is written by the server before it sends
//     kValuesInShm and read by the worker after it received that frame. Requests and replies of one
//     connection alternate, and a send/receive pair orders the memory (the kernel's socket lock),
//     so neither side ever touches a region the other is using.
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
  // The worker's side: a new segment for `dense` floats each way, with a random nonce.
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
