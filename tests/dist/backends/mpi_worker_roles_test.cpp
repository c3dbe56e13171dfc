// The ranks of mpi_communicator_test.cpp's mpi-specific cases: that test starts this binary under
// mpirun with TESSERA_MPI_TEST_ROLE=<test name> and --gtest_filter=MpiWorkerRole.<test name>, so each
// rank runs one of these. In an ordinary run they skip. Reports the parent reads go to
// $TESSERA_MPI_TEST_DIR/rank<r>.txt (a rank killed by mpirun may lose its buffered stdout).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>

#include <unistd.h>
#include <vector>

#include "tessera/core/error.h"
#include "tessera/core/tensor.h"
#include "tessera/dist/backends/mpi/mpi_job.h"
#include "tessera/dist/init.h"
#include "tessera/ops/ops.h"

namespace tessera {
namespace {

using namespace std::chrono_literals;
using dist::Buffer;
using dist::ReduceOp;

bool is_role(const char* name) {
  const char* role = std::getenv("TESSERA_MPI_TEST_ROLE");
  return role != nullptr && std::string(role) == name;
}

#define ONLY_UNDER_MPIRUN(name) \
  if (!is_role(name)) GTEST_SKIP() << "a rank of an mpirun job that MpiCommunicator tests start"

void report(int rank, const std::string& text) {
  std::ofstream out(std::string(std::getenv("TESSERA_MPI_TEST_DIR")) + "/rank" + std::to_string(rank) + ".txt",
                    std::ios::app);
  out << text << "\n";
}

float value(int r, int64_t i) { return static_cast<float>(r * 100 + i % 17); }

dist::InitOptions mpi_options(dist::Milliseconds timeout) {
  dist::InitOptions options;
  options.backend = "mpi";
  options.timeout = timeout;
  return options;
}

Tensor filled(int r, int64_t n) {
  Tensor t = Tensor::empty({n});
  for (int64_t i = 0; i < n; ++i) t.data<float>()[i] = value(r, i);
  return t;
}

TEST(MpiWorkerRole, Features) {
  ONLY_UNDER_MPIRUN("Features");
  auto group = dist::init_process_group(mpi_options(60s));
  const int rank = group->rank(), world = group->size();
  const int64_t n = 1027;
  const std::vector<int64_t> counts(static_cast<size_t>(world), n);

  // bfloat16 through the user-defined MPI ops, and int64 min.
  Tensor b = Tensor::empty({n}, DType::BFloat16);
  for (ReduceOp op : {ReduceOp::Max, ReduceOp::Min}) {
    for (int64_t i = 0; i < n; ++i) b.data<BFloat16>()[i] = float_to_bf16(static_cast<float>((i + rank) % 5 - 2));
    group->allreduce(b, op)->wait();
    for (int64_t i = 0; i < n; ++i) {
      float want = op == ReduceOp::Max ? -2.0f : 2.0f;
      for (int r = 0; r < world; ++r) {
        float v = static_cast<float>((i + r) % 5 - 2);
        want = op == ReduceOp::Max ? std::max(want, v) : std::min(want, v);
      }
      ASSERT_EQ(bf16_to_float(b.data<BFloat16>()[i]), want) << dist::reduce_op_name(op) << " at " << i;
    }
  }
  Tensor l = Tensor::empty({n}, DType::Int64);
  for (int64_t i = 0; i < n; ++i) l.data<int64_t>()[i] = (rank + 1) * (i % 3 == 0 ? -1 : 1);
  group->allreduce(l, ReduceOp::Min)->wait();
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(l.data<int64_t>()[i], i % 3 == 0 ? -world : 1) << i;

  // allgather in place: each rank's input is already its slot of the output (MPI_IN_PLACE).
  Tensor gathered = zeros({n * world});
  Buffer all{gathered.raw_data(), n * world, DType::Float32};
  Buffer mine = all.slice(rank * n, n);
  for (int64_t i = 0; i < n; ++i) mine.as<float>()[i] = value(rank, i);
  group->allgather(mine, all, counts)->wait();
  for (int r = 0; r < world; ++r)
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(gathered.data<float>()[r * n + i], value(r, i)) << r << " " << i;

  // reduce_scatter whose output is this rank's segment of its own input (staged by the backend).
  Tensor scattered = filled(rank, n * world);
  Buffer whole{scattered.raw_data(), n * world, DType::Float32};
  group->reduce_scatter(whole, whole.slice(rank * n, n), counts, ReduceOp::Sum)->wait();
  for (int64_t i = 0; i < n; ++i) {
    float want = 0;
    for (int r = 0; r < world; ++r) want += value(r, rank * n + i);
    ASSERT_EQ(scattered.data<float>()[rank * n + i], want) << i;
  }

  // alltoall with one tensor as both input and output.
  Tensor exchanged = filled(rank, n * world);
  group->alltoall(exchanged, exchanged)->wait();
  for (int s = 0; s < world; ++s)
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(exchanged.data<float>()[s * n + i], value(s, rank * n + i)) << s;

  // Subgroups of even and odd ranks (MPI_Comm_create_group over the members only), and p2p inside
  // one, where ranks are the subgroup's.
  std::vector<int> evens, odds;
  for (int r = 0; r < world; ++r) (r % 2 == 0 ? evens : odds).push_back(r);
  auto even = group->new_group(evens);
  auto odd = odds.empty() ? nullptr : group->new_group(odds);
  auto sub = rank % 2 == 0 ? even : odd;
  ASSERT_NE(sub, nullptr);
  ASSERT_EQ(sub->rank(), rank / 2);
  Tensor who = full({3}, static_cast<float>(rank));
  sub->allreduce(who)->wait();
  float want = 0;
  for (int r = rank % 2; r < world; r += 2) want += static_cast<float>(r);
  EXPECT_EQ(who.data<float>()[2], want);
  if (sub->size() >= 2 && sub->rank() < 2) {
    Tensor message = sub->rank() == 0 ? filled(rank, n) : zeros({n});
    auto work = sub->rank() == 0 ? sub->send(message, 1, 3) : sub->recv(message, 0, 3);
    work->wait();
    if (sub->rank() == 1) {
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(message.data<float>()[i], value(rank - 2, i)) << i;
    }
  }
  sub->barrier()->wait();

  // A second group in the same job (the job and its store are reused), its collectives running on
  // its own worker thread while the first group's run, and a large p2p transfer from a third
  // thread meanwhile: MPI_THREAD_MULTIPLE at work.
  auto second = dist::init_process_group(mpi_options(60s));
  const int64_t large = 1 << 20;
  std::thread transfer;
  Tensor message = rank == 0 ? filled(7, large) : zeros({large});
  if (world >= 2 && rank < 2) {
    transfer = std::thread([&] {
      (rank == 0 ? group->send(message, 1, 11) : group->recv(message, 0, 11))->wait();
    });
  }
  std::vector<Tensor> a, c;
  std::vector<dist::WorkPtr> works;
  for (int k = 0; k < 20; ++k) {
    a.push_back(full({4099}, 1.0f));
    c.push_back(full({4099}, 2.0f));
    works.push_back(group->allreduce(a.back()));
    works.push_back(second->allreduce(c.back()));
  }
  for (auto& w : works) w->wait();
  for (int k = 0; k < 20; ++k) {
    ASSERT_EQ(a[k].data<float>()[4098], static_cast<float>(world));
    ASSERT_EQ(c[k].data<float>()[4098], 2.0f * static_cast<float>(world));
  }
  if (transfer.joinable()) transfer.join();
  if (rank == 1) {
    for (int64_t i = 0; i < large; i += 4097) ASSERT_EQ(message.data<float>()[i], value(7, i)) << i;
  }
}

TEST(MpiWorkerRole, RecvTimeout) {
  ONLY_UNDER_MPIRUN("RecvTimeout");
  auto group = dist::init_process_group(mpi_options(30s));
  const int rank = group->rank();
  ASSERT_EQ(group->size(), 2);
  if (rank == 0) {
    Tensor t = zeros({16});
    auto work = group->recv(t, 1, 5);
    try {
      work->wait(300ms);
      FAIL() << "a recv nobody sends to completed";
    } catch (const TimeoutError& e) {
      EXPECT_NE(std::string(e.what()).find("[mpi recv] rank 0: from rank 1 (tag 5) not complete after"),
                std::string::npos)
          << e.what();
    }
  } else {
    // Dropped without a wait: cancelled by its destructor.
    Tensor t = zeros({16});
    group->recv(t, 0, 6);
  }
  group->barrier()->wait();
  // Both cancelled receives are gone: a new message with their tags reaches the new receives.
  Tensor t = rank == 0 ? zeros({16}) : full({16}, 7.0f);
  Tensor u = rank == 1 ? zeros({16}) : full({16}, 9.0f);
  auto first = rank == 0 ? group->recv(t, 1, 5) : group->send(t, 0, 5);
  auto second = rank == 1 ? group->recv(u, 0, 6) : group->send(u, 1, 6);
  first->wait();
  second->wait();
  EXPECT_EQ(t.data<float>()[15], 7.0f);
  EXPECT_EQ(u.data<float>()[15], 9.0f);
  Tensor sum = ones({8});
  group->allreduce(sum)->wait();
  EXPECT_EQ(sum.data<float>()[7], 2.0f);
}

TEST(MpiWorkerRole, Absent) {
  ONLY_UNDER_MPIRUN("Absent");
  auto group = dist::init_process_group(mpi_options(1500ms));
  // The test watches these pids to tell that every rank has exited (mpi_communicator_test.cpp).
  std::ofstream(std::string(std::getenv("TESSERA_MPI_TEST_DIR")) + "/pid" + std::to_string(group->rank()) + ".txt")
      << ::getpid() << "\n";
  // The job's own store (join_mpi_job returns the job init_process_group joined): where the ranks
  // meet once the group is broken.
  auto store = dist::join_mpi_job(60s).store;
  const int rank = group->rank(), victim = 2;
  Tensor t = ones({16});
  group->allreduce(t)->wait();  // #0: everyone is there
  if (rank != victim) {
    Tensor u = ones({16});
    try {
      group->allreduce(u)->wait();  // #1, which the victim never calls
      report(rank, "UNEXPECTED SUCCESS");
    } catch (const TimeoutError& e) {
      report(rank, std::string("TimeoutError ") + e.what());
    }
    store->set("reported/" + std::to_string(rank), "1");
  }
  store->wait({"reported/0", "reported/1"}, 60s);
}

}  // namespace
}  // namespace tessera
