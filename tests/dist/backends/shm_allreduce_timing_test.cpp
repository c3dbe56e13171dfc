// Not a test: the measurement behind the shm backend's choices (chunk size, spinning), kept here so
// that it can be rerun. Disabled, so ctest never runs it. Forks TESSERA_SHM_BENCH_NPROC processes
// (default 2) over a TcpStore and prints nccl-tests' figures for float32 allreduce:
//   TESSERA_SHM_BENCH_NPROC=2 ./tessera_tests --gtest_also_run_disabled_tests --gtest_filter='*ShmTiming*'
// busbw = bytes / time * 2(n-1)/n, time = the slowest rank's mean per call after warm-up.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "tessera/dist/backends/backend.h"
#include "tessera/dist/store/tcp_store.h"
#include "tessera/dist/store/tcp_store_server.h"

namespace tessera {
namespace {

using namespace std::chrono_literals;

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::atoi(v) : fallback;
}

void run_rank(int rank, int nproc, uint16_t port, const std::string& token) {
  dist::TcpStoreOptions so;
  so.port = port;
  so.token = token;
  so.rank = rank;
  so.timeout = 60s;
  dist::BackendContext c;
  c.store = std::make_shared<dist::TcpStore>(so);
  c.rank = rank;
  c.size = nproc;
  c.local_size = nproc;
  auto comm = dist::make_shm_communicator(c);
  // TESSERA_SHM_BENCH_KIB=4 times one size (in KiB) instead of 1, 16 and 64 MiB.
  std::vector<int64_t> kibs = {1024, 16 * 1024, 64 * 1024};
  if (int kib = env_int("TESSERA_SHM_BENCH_KIB", 0); kib > 0) kibs = {kib};
  for (int64_t kib : kibs) {
    const int64_t count = kib * 1024 / 4;
    const int64_t mib = kib;  // the key and label below are in KiB
    std::vector<float> data(static_cast<size_t>(count), 1.0f);
    dist::Buffer buffer{data.data(), count, DType::Float32};
    auto deadline = [] { return std::chrono::steady_clock::now() + 60s; };
    const int iterations = static_cast<int>(std::clamp<int64_t>(200 * 1024 / kib, 10, 2000));
    for (int i = 0; i < 3; ++i) comm->allreduce(buffer, dist::ReduceOp::Sum, deadline());
    for (int rep = 0; rep < 3; ++rep) {
      std::fill(data.begin(), data.end(), 1.0f);
      comm->barrier(deadline());
      auto start = std::chrono::steady_clock::now();
      for (int i = 0; i < iterations; ++i) comm->allreduce(buffer, dist::ReduceOp::Sum, deadline());
      double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / iterations;
      // Slowest rank: every rank publishes its time, rank 0 prints the maximum.
      c.store->set("t/" + std::to_string(mib) + "/" + std::to_string(rep) + "/" + std::to_string(rank),
                   std::to_string(seconds));
      if (rank == 0) {
        double slowest = 0;
        for (int r = 0; r < nproc; ++r)
          slowest = std::max(slowest, std::stod(c.store->get_string("t/" + std::to_string(mib) + "/" +
                                                                     std::to_string(rep) + "/" + std::to_string(r))));
        double bytes = static_cast<double>(count) * 4;
        double busbw = bytes / slowest * 2.0 * (nproc - 1) / nproc / 1e9;
        std::printf("shm allreduce np=%d %6lld KiB rep %d: %8.1f us  busbw %6.2f GB/s\n", nproc,
                    static_cast<long long>(mib), rep, slowest * 1e6, busbw);
        std::fflush(stdout);
      }
    }
  }
}

TEST(DISABLED_ShmTiming, AllreduceBusBandwidth) {
  const int nproc = env_int("TESSERA_SHM_BENCH_NPROC", 2);
  dist::TcpStoreServerOptions o;
  o.token = "shm-timing";
  dist::TcpStoreServer server(o);
  std::vector<pid_t> children;
  for (int r = 0; r < nproc; ++r) {
    pid_t pid = ::fork();
    if (pid == 0) {
      int code = 0;
      try {
        run_rank(r, nproc, server.port(), o.token);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d: %s\n", r, e.what());
        code = 1;
      }
      ::_exit(code);
    }
    children.push_back(pid);
  }
  for (pid_t pid : children) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
}

}  // namespace
}  // namespace tessera
