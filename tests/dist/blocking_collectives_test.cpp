// The blocking forms of ProcessGroup (blocking_allreduce, blocking_broadcast, blocking_barrier):
// finished on return, in issue order with the asynchronous operations around them, on a backend
// that runs them on the waiting thread (shm, tcp: the worker is not woken) and on one that does not
// (gloo).
#include <gtest/gtest.h>

#include "dist/collective_suite.h"
#include "tessera/dist/backends/backend.h"
#include "tessera/dist/backends/shm/shm_communicator.h"
#include "tessera/ops/ops.h"

namespace tessera {
namespace {

using dist::ReduceOp;

class BlockingCollectives : public ::testing::TestWithParam<std::string> {};

TEST_P(BlockingCollectives, FinishOnReturnInIssueOrderWithTheAsynchronousOnes) {
  const std::string backend = GetParam();
  testing::CommunicatorFactory make = [&](const dist::BackendContext& c) {
    if (backend == "shm") return dist::make_shm_communicator(c);
    if (backend == "tcp") {
      dist::BackendContext local = c;
      local.bind_host = "127.0.0.1";
      return dist::make_tcp_communicator(local);
    }
    return dist::make_gloo_communicator(c);
  };
  dist::ProcessGroupOptions options;
  options.timeout = std::chrono::seconds(60);
  testing::run_on_threads(
      3, make,
      [&](dist::ProcessGroup& group) {
        const float r = static_cast<float>(group.rank());
        for (int round = 0; round < 50; ++round) {
          // An asynchronous all-reduce left running (or queued) while blocking ones are issued.
          Tensor pending = full({1000}, r + round);
          dist::WorkPtr left = group.allreduce(pending);
          Tensor small = full({16}, r);
          group.blocking_allreduce(small, ReduceOp::Max);
          for (int i = 0; i < 16; ++i) ASSERT_EQ(small.data<float>()[i], 2.0f);
          Tensor from = full({8}, r * 10);
          group.blocking_broadcast(from, 1);
          for (int i = 0; i < 8; ++i) ASSERT_EQ(from.data<float>()[i], 10.0f);
          group.blocking_barrier();
          left->wait();
          for (int i = 0; i < 1000; ++i) ASSERT_EQ(pending.data<float>()[i], 3.0f + 3.0f * round);
        }
      },
      options);
}

INSTANTIATE_TEST_SUITE_P(Backends, BlockingCollectives, ::testing::Values("shm", "tcp", "gloo"));

}  // namespace
}  // namespace tessera
