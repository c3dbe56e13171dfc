// `tessera bench comm`: collective bandwidth in the format of nccl-tests, run under the launcher
// (`tessera run --nproc-per-node 2 -- tessera bench comm --backend shm`) or mpirun.
//
// Method (shared/BENCHMARKING.md, and the same in bench/reference/*): per size, the result is
// checked first against the serial reference, then `warmup` untimed calls, a barrier, and `iters`
// calls each waited on; time is the slowest rank's mean per call. algbw = bytes / time; busbw =
// algbw × the nccl-tests factor of the op (2(n−1)/n for allreduce), so figures compare across
// world sizes and with the peers.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <vector>

#include "bench/bench.h"
#include "tessera/core/error.h"
#include "tessera/dist/init.h"
#include "tessera/ops/ops.h"

namespace tessera::bench {

namespace {

using Clock = std::chrono::steady_clock;

// Writes 64 MiB, more than this machine's last-level cache: what the collective's buffers held in
// cache is gone, as after the compute between a training step's collectives.
void evict_caches() {
  static std::vector<char> scratch(size_t{64} << 20);
  static char round = 0;
  std::fill(scratch.begin(), scratch.end(), ++round);
}

double bus_factor(const std::string& op, int n) {
  if (n <= 1) return 1.0;
  if (op == "allreduce") return 2.0 * (n - 1) / n;
  if (op == "broadcast") return 1.0;
  return static_cast<double>(n - 1) / n;  // allgather, reduce_scatter, alltoall
}

// The number of timed calls at `bytes`: about 64 MiB moved per size (at least 5 calls, at most
// 200), so small sizes average out jitter and large ones finish in a few seconds.
int iterations_for(size_t bytes, int requested) {
  if (requested > 0) return requested;
  double calls = 64.0 * (1 << 20) / std::max<size_t>(bytes, 1);
  return static_cast<int>(std::clamp(calls, 5.0, 200.0));
}

struct Buffers {
  Tensor input, output;
};

// Buffers of `count` float32 per rank, laid out for `op`; `bytes` is what nccl-tests calls the
// size: the allreduce/broadcast buffer, the allgather output, the reduce_scatter input.
Buffers make_buffers(dist::ProcessGroup& group, const std::string& op, int64_t count, bool symmetric) {
  const int world = group.size();
  if (symmetric) return {group.symmetric_zeros({count}), Tensor()};
  if (op == "allgather") return {zeros({count / world}), zeros({count})};
  if (op == "reduce_scatter") return {zeros({count}), zeros({count / world})};
  if (op == "alltoall") return {zeros({count}), zeros({count})};
  return {zeros({count}), Tensor()};
}

dist::WorkPtr issue(dist::ProcessGroup& group, const std::string& op, const Buffers& b) {
  if (op == "allreduce") return group.allreduce(b.input);
  if (op == "broadcast") return group.broadcast(b.input, 0);
  if (op == "allgather") return group.allgather(b.input, b.output);
  if (op == "reduce_scatter") return group.reduce_scatter(b.input, b.output);
  return group.alltoall(b.input, b.output);
}

// A timed call: blocking, as MPI_Allreduce is (the blocking forms wake no worker thread where the
// backend runs the call on the caller's thread).
void run_blocking(dist::ProcessGroup& group, const std::string& op, const Buffers& b) {
  if (op == "allreduce") return group.blocking_allreduce(b.input);
  if (op == "broadcast") return group.blocking_broadcast(b.input, 0);
  issue(group, op, b)->wait();
}

// Fills the inputs with rank-dependent integers, runs `op` once and counts wrong elements.
int64_t check(dist::ProcessGroup& group, const std::string& op, const Buffers& b) {
  const int rank = group.rank(), world = group.size();
  float* in = b.input.data<float>();
  int64_t n = b.input.numel();
  auto value = [](int r, int64_t i) { return static_cast<float>((r + 1) + i % 7); };
  for (int64_t i = 0; i < n; ++i) in[i] = value(rank, i);
  issue(group, op, b)->wait();
  int64_t wrong = 0;
  if (op == "allreduce") {
    for (int64_t i = 0; i < n; ++i) {
      float want = 0;
      for (int r = 0; r < world; ++r) want += value(r, i);
      wrong += in[i] != want;
    }
  } else if (op == "broadcast") {
    for (int64_t i = 0; i < n; ++i) wrong += in[i] != value(0, i);
  } else if (op == "allgather") {
    const float* out = b.output.data<float>();
    for (int r = 0; r < world; ++r)
      for (int64_t i = 0; i < n; ++i) wrong += out[r * n + i] != value(r, i);
  } else if (op == "reduce_scatter") {
    const float* out = b.output.data<float>();
    int64_t m = b.output.numel();
    for (int64_t i = 0; i < m; ++i) {
      float want = 0;
      for (int r = 0; r < world; ++r) want += value(r, rank * m + i);
      wrong += out[i] != want;
    }
  } else {  // alltoall: block s of my output is block `rank` of rank s's input
    const float* out = b.output.data<float>();
    int64_t block = n / world;
    for (int s = 0; s < world; ++s)
      for (int64_t i = 0; i < block; ++i) wrong += out[s * block + i] != value(s, rank * block + i);
  }
  return wrong;
}

}  // namespace

int comm(const CommOptions& options) {
  const std::vector<std::string> ops = {"allreduce", "broadcast", "allgather", "reduce_scatter", "alltoall"};
  TESSERA_CHECK(std::find(ops.begin(), ops.end(), options.op) != ops.end(), "[bench comm] unknown op '",
                options.op, "'; choose allreduce, broadcast, allgather, reduce_scatter or alltoall");
  TESSERA_CHECK(!options.symmetric || options.op == "allreduce",
                "[bench comm] --symmetric applies to allreduce only (the backends' other collectives copy)");
  TESSERA_CHECK(options.min_bytes >= 4 && options.min_bytes <= options.max_bytes,
                "[bench comm] need 4 <= --min-bytes <= --max-bytes");
  dist::InitOptions init;
  init.backend = options.backend;
  init.timeout = std::chrono::milliseconds(options.timeout_ms);
  auto group = dist::init_process_group(init);
  const int rank = group->rank(), world = group->size();
  if (rank == 0 && !options.json) {
    std::printf("# tessera bench comm: %s, backend %s, %d ranks, float32, sum%s%s\n", options.op.c_str(),
                group->backend_name(), world, options.symmetric ? ", symmetric buffers" : "",
                options.cold ? ", cold caches (each call after a 64 MiB write and a barrier)" : "");
    std::printf("# time: slowest rank's mean per call; busbw = algbw x %.3f\n", bus_factor(options.op, world));
    std::printf("%12s %12s %10s %10s %10s %8s %7s\n", "size(B)", "count", "time(us)", "algbw(GB/s)",
                "busbw(GB/s)", "#wrong", "iters");
  }
  int64_t total_wrong = 0;
  for (size_t bytes = options.min_bytes; bytes <= options.max_bytes; bytes *= 2) {
    // Round the element count to a multiple of the world size, as nccl-tests does.
    int64_t count = static_cast<int64_t>(bytes / 4) / world * world;
    if (count == 0) continue;
    Buffers b = make_buffers(*group, options.op, count, options.symmetric);
    int64_t wrong = check(*group, options.op, b);
    int iters = iterations_for(bytes, options.iters);
    for (int i = 0; i < options.warmup; ++i) issue(*group, options.op, b)->wait();
    double mean_s = 0;
    if (options.cold) {
      for (int i = 0; i < iters; ++i) {
        evict_caches();
        group->blocking_barrier();
        const auto start = Clock::now();
        run_blocking(*group, options.op, b);
        mean_s += std::chrono::duration<double>(Clock::now() - start).count() / iters;
      }
    } else {
      group->blocking_barrier();
      auto start = Clock::now();
      for (int i = 0; i < iters; ++i) run_blocking(*group, options.op, b);
      mean_s = std::chrono::duration<double>(Clock::now() - start).count() / iters;
    }
    // The slowest rank's time, and the wrong elements of all ranks.
    Tensor stats = Tensor::empty({2}, DType::Float32);
    stats.data<float>()[0] = static_cast<float>(mean_s);
    stats.data<float>()[1] = static_cast<float>(wrong);
    Tensor slowest = stats.contiguous().clone();
    group->blocking_allreduce(slowest, dist::ReduceOp::Max);
    group->blocking_allreduce(stats, dist::ReduceOp::Sum);
    double time_s = slowest.data<float>()[0];
    int64_t all_wrong = static_cast<int64_t>(stats.data<float>()[1]);
    total_wrong += all_wrong;
    size_t size = static_cast<size_t>(count) * 4;
    double algbw = size / time_s / 1e9, busbw = algbw * bus_factor(options.op, world);
    if (rank == 0) {
      if (options.json) {
        std::printf("{\"impl\": \"tessera-%s%s\", \"op\": \"%s\", \"ranks\": %d, \"bytes\": %zu, \"time_us\": %.2f, "
                    "\"algbw\": %.4f, \"busbw\": %.4f, \"wrong\": %lld}\n",
                    group->backend_name(), options.symmetric ? "+symmetric" : "", options.op.c_str(), world, size,
                    time_s * 1e6, algbw, busbw,
                    static_cast<long long>(all_wrong));
      } else {
        std::printf("%12zu %12lld %10.1f %10.3f %10.3f %8lld %7d\n", size, static_cast<long long>(count), time_s * 1e6,
                    algbw, busbw, static_cast<long long>(all_wrong), iters);
      }
      std::fflush(stdout);
    }
  }
  return total_wrong == 0 ? 0 : 1;
}

}  // namespace tessera::bench
