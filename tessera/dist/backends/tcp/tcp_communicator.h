// tcp: our own collectives over plain TCP connections, one per pair of ranks (tcp_mesh.h), for jobs
// that span machines. Why not Gloo's: between two test hosts whose 4 KiB round trip is 131 us, Gloo's
// 4 KiB all-reduce took 1844 us (and 1665 us over loopback: the cost is in its path, not the network),
// and its large all-reduce reached 40% of one TCP stream (docs/benchmarks.md). Here a collective is a
// few steps of sends and receives that run at once on non-blocking sockets (tcp_transfers.h), with
// no thread hand-off and no per-call setup.
//
// Algorithms, for p ranks, n bytes, a one-way latency a and a link of b bytes/s per direction:
//   allreduce, n <= kTcpSmallBytes and p a power of two: recursive doubling, log2(p) exchanges of the
//       whole buffer: log2(p) * (a + n/b). For p = 2 that is one exchange, about one round trip.
//   allreduce, p a power of two and at least 4, kTcpSmallBytes < n <= kTcpHalvingMaxBytes: reduce-scatter by recursive
//       halving then all-gather by recursive doubling (Rabenseifner), 2 log2(p) steps moving n/2,
//       n/4, ..., n/p and back: 2 log2(p) a + 2 (p-1)/p * n/b. The same bytes as the ring in fewer
//       steps, so it wins where the step's latency is a large part of the time.
//   allreduce otherwise: ring reduce-scatter then ring all-gather, 2(p-1) steps of n/p bytes each way:
//       2(p-1) * (a + n/(p b)), i.e. busbw close to the link's rate; the reduction of each received
//       chunk runs while the rest of the segment is still arriving. (At p = 2 the ring and halving-
//       doubling are the same two exchanges.)
//   reduce: the all-reduce (the root keeps the result).
//   broadcast: the root sends to every rank at once when n <= kTcpSmallBytes or p = 2; otherwise it
//       scatters p segments and a ring all-gather completes them: about 2 n/b instead of (p-1) n/b.
//   allgather, reduce_scatter: halving-doubling's log2(p) steps where the all-reduce would take them,
//       else rings of p-1 steps; any counts.
//   alltoall: p-1 pairwise exchanges, step k with ranks r+k and r-k.
//   barrier: dissemination, ceil(log2 p) rounds of empty messages.
// Results are the same bits on every rank: each ring or halving segment is reduced by one rank and
// then copied, and recursive doubling combines the lower half's partial with the upper half's on
// both sides. TESSERA_TCP_ALGORITHM must be the same on every rank (a ring meeting halving-doubling
// fails with the size mismatch named).
// Point-to-point (post_send/post_recv, which pipelines overlap with collectives from other threads)
// goes to a Gloo communicator built beside it.
//
// What changes at 10-100 Gbit/s (docs/distributed.md): one TCP stream per peer no longer fills the
// link; several connections per peer and a reduction kernel faster than the wire are the next steps.
#pragma once
#include <cstddef>

namespace tessera::dist {

// At most this many bytes, an all-reduce over a power-of-two group doubles recursively and a
// broadcast goes straight from the root.
constexpr size_t kTcpSmallBytes = size_t(64) << 10;

// At most this many bytes in all, a reduce-scatter, all-gather or all-reduce over a power-of-two
// group of 4 or more ranks halves and doubles instead of running the ring. Measured on 4 test hosts
// x 1 process (docs/benchmarks.md), all-reduce: unshaped, halving-doubling took 232-267 us at 128 KiB
// against the ring's 320-359 and 1.4-1.7 ms at 1 MiB against 1.9-2.0, the same from 2 MiB; at
// 1 Gbit/s both fill the link up to 2 MiB, and from 4 MiB the ring is 4-15% faster (the first
// halving step puts n/2 at once into the shaped link's queue).
constexpr size_t kTcpHalvingMaxBytes = size_t(2) << 20;

// TESSERA_TCP_ALGORITHM: auto (by size, above), ring, or halving-doubling (where p is a power of two).
enum class TcpAlgorithm { Auto, Ring, HalvingDoubling };
TcpAlgorithm tcp_algorithm();

}  // namespace tessera::dist
