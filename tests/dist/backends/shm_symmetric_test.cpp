// The shm backend's symmetric memory (ProcessGroup::symmetric_zeros, shm_symmetric.h), ranks as
// threads over real shared-memory objects: its allreduce gives the slotted allreduce's result bit
// for bit (float32, bfloat16, int64; sum, average, max; whole buffers and slices; 2-4 ranks), a
// rank that passes other memory or another slice fails the allreduce on every rank instead of
// summing the wrong bytes, no name is left in /dev/shm, and the memory outlives its group.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <string>
#include <thread>

#include "dist/collective_suite.h"
#include "tessera/dist/backends/shm/shm_communicator.h"
#include "tessera/ops/ops.h"
#include "testing/expect.h"

namespace tessera {
namespace {

using namespace std::chrono_literals;
using dist::ProcessGroup;
using dist::ReduceOp;

dist::ProcessGroupOptions timeout_of(std::chrono::milliseconds t) {
  dist::ProcessGroupOptions o;
  o.timeout = t;
  return o;
}

// Rank r's element i: values whose sums round, so that a different fold order would show.
void fill_rank_values(Tensor& t, int rank) {
  for (int64_t i = 0; i < t.numel(); ++i) {
    const float v = std::sin(0.37f * static_cast<float>(rank + 1) + 0.011f * static_cast<float>(i)) * 97.0f;
    switch (t.dtype()) {
      case DType::Float32: t.data<float>()[i] = v; break;
      case DType::BFloat16: t.data<BFloat16>()[i] = float_to_bf16(v); break;
      case DType::Int64: t.data<int64_t>()[i] = static_cast<int64_t>(v * 1000); break;
      default: FAIL() << "unexpected dtype";
    }
  }
}

bool all_zero(const Tensor& t) {
  const auto* p = static_cast<const unsigned char*>(t.raw_data());
  for (size_t i = 0; i < static_cast<size_t>(t.numel()) * dtype_size(t.dtype()); ++i)
    if (p[i] != 0) return false;
  return true;
}

// Our process's names in /dev/shm (segments are named /tessera-shm-<pid>-...).
int our_shm_names() {
  const std::string prefix = "tessera-shm-" + std::to_string(::getpid()) + "-";
  int n = 0;
  for (const auto& entry : std::filesystem::directory_iterator("/dev/shm"))
    if (entry.path().filename().string().rfind(prefix, 0) == 0) ++n;
  return n;
}

class ShmSymmetric : public ::testing::TestWithParam<int> {};

TEST_P(ShmSymmetric, AllreduceGivesTheSlottedResultBitForBit) {
  // 8193 float32 is just over the one-round limit (32 KiB), the smallest that takes the symmetric
  // path; 300001 spans several of the slotted path's 1 MiB rounds. Slices start 16 elements in.
  testing::run_on_threads(
      GetParam(), dist::make_shm_communicator,
      [](ProcessGroup& group) {
        for (DType dtype : {DType::Float32, DType::BFloat16, DType::Int64}) {
          for (int64_t count : {int64_t{8193}, int64_t{300001}}) {
            Tensor symmetric = group.symmetric_zeros({count + 16}, dtype);
            ASSERT_TRUE(all_zero(symmetric));
            for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max}) {
              for (int64_t start : {int64_t{0}, int64_t{16}}) {
                fill_rank_values(symmetric, group.rank());
                Tensor ordinary = symmetric.clone();
                Tensor a = symmetric.slice(0, start, start + count), b = ordinary.slice(0, start, start + count);
                group.allreduce(a, op)->wait();
                group.allreduce(b, op)->wait();
                ASSERT_TRUE(testing::bitwise_equal(symmetric, ordinary))
                    << dtype_name(dtype) << " x " << count << ", " << dist::reduce_op_name(op) << ", from " << start
                    << ", rank " << group.rank();
              }
            }
          }
        }
      },
      timeout_of(60s));
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, ShmSymmetric, ::testing::Values(2, 3, 4),
                         [](const auto& info) { return "world_" + std::to_string(info.param); });

class ShmSymmetricMismatch : public ::testing::TestWithParam<int> {};

TEST_P(ShmSymmetricMismatch, ARankThatPassesOrdinaryMemoryFailsEveryRank) {
  // After three matched calls (which leave a descriptor in each of the slot's three buffers), one
  // rank passes ordinary memory of the same size: 80 KB, which the slotted path moves in two rounds,
  // never writing the start of rank 0's slot. The symmetric rank names the mismatch (an old
  // descriptor is told by its round); the other waits for a round the symmetric rank never starts.
  const int ordinary_rank = GetParam();
  testing::run_on_threads(
      2, dist::make_shm_communicator,
      [&](ProcessGroup& group) {
        Tensor symmetric = group.symmetric_zeros({20000});
        for (int i = 0; i < 3; ++i) {
          fill_(symmetric, 1.0f);
          group.allreduce(symmetric)->wait();
          ASSERT_EQ(symmetric.to_vector<float>()[0], 2.0f);
        }
        if (group.rank() != ordinary_rank) {
          const std::string message = "[shm allreduce] rank " + std::to_string(group.rank()) +
                                      " passed symmetric buffer #1 at byte 0, 20000 x float32, sum, but rank " +
                                      std::to_string(ordinary_rank) + " passed ordinary memory";
          testing::expect_error<ValueError>([&] { group.allreduce(symmetric)->wait(); }, {message.c_str()});
        } else {
          Tensor ordinary = symmetric.clone();
          testing::expect_error<Error>([&] { group.allreduce(ordinary)->wait(); }, {"allreduce", "timed out"});
        }
      },
      timeout_of(3s));
}

INSTANTIATE_TEST_SUITE_P(OrdinaryRank, ShmSymmetricMismatch, ::testing::Values(0, 1),
                         [](const auto& info) { return "rank_" + std::to_string(info.param) + "_ordinary"; });

// The path itself, on the communicator: taken above the one-round size, for symmetric memory only.
TEST(ShmSymmetricPath, IsTakenForSymmetricMemoryAboveTheOneRoundSizeOnly) {
  auto store = std::make_shared<dist::HashStore>(10s);
  std::vector<std::string> failures(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      try {
        dist::BackendContext c;
        c.store = store;
        c.rank = r;
        c.size = 2;
        c.local_size = 2;
        c.timeout = 10s;
        auto comm = dist::make_shm_communicator(c);
        auto& shm = dynamic_cast<dist::ShmCommunicator&>(*comm);
        const auto deadline = std::chrono::steady_clock::now() + 10s;
        std::shared_ptr<void> memory = comm->allocate_symmetric(40000 * sizeof(float), deadline);
        if (!memory) throw std::runtime_error("no symmetric memory");
        float* d = static_cast<float*>(memory.get());
        std::fill(d, d + 40000, static_cast<float>(r + 1));
        comm->allreduce(dist::Buffer{d, 40000, DType::Float32}, ReduceOp::Sum, deadline);
        if (shm.symmetric_allreduces() != 1 || d[0] != 3.0f || d[39999] != 3.0f)
          throw std::runtime_error("the symmetric path did not run, or summed wrong");
        comm->allreduce(dist::Buffer{d, 100, DType::Float32}, ReduceOp::Sum, deadline);  // one round
        std::vector<float> ordinary(40000, 1.0f);
        comm->allreduce(dist::Buffer{ordinary.data(), 40000, DType::Float32}, ReduceOp::Sum, deadline);
        if (shm.symmetric_allreduces() != 1 || d[0] != 6.0f || d[100] != 3.0f || ordinary[39999] != 2.0f)
          throw std::runtime_error("a small or ordinary buffer took the symmetric path, or summed wrong");
      } catch (const std::exception& e) {
        failures[static_cast<size_t>(r)] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures[0], "");
  EXPECT_EQ(failures[1], "");
}

TEST(ShmSymmetricSlices, DifferentSlicesAreAValueErrorOnEveryRankNamingBoth) {
  testing::run_on_threads(
      2, dist::make_shm_communicator,
      [](ProcessGroup& group) {
        Tensor symmetric = group.symmetric_zeros({20016});
        const int64_t start = group.rank() == 0 ? 0 : 16;
        const std::string other = group.rank() == 0 ? "1" : "0";
        testing::expect_error<ValueError>(
            [&] { group.allreduce(symmetric.slice(0, start, start + 20000))->wait(); },
            {"symmetric buffer #1 at byte 0, 20000 x float32", "symmetric buffer #1 at byte 64, 20000 x float32",
             ("but rank " + other + " passed").c_str()});
      },
      timeout_of(30s));
}

TEST(ShmSymmetricLifetime, NoNameIsLeftInDevShmAndTheMemoryOutlivesItsGroup) {
  const int before = our_shm_names();
  std::vector<Tensor> kept(3);
  testing::run_on_threads(
      3, dist::make_shm_communicator,
      [&](ProcessGroup& group) {
        for (int i = 0; i < 4; ++i) {
          Tensor t = group.symmetric_zeros({40000});
          fill_(t, 1.0f);
          group.allreduce(t)->wait();
          EXPECT_EQ(t.to_vector<float>()[39999], 3.0f);
          if (i == 3) kept[static_cast<size_t>(group.rank())] = t;
        }
      },
      timeout_of(60s));
  // Every rank's buffers and the group's segment were unlinked once all had mapped them.
  EXPECT_EQ(our_shm_names(), before);
  // The groups are gone; the buffers are still readable and writable.
  for (Tensor& t : kept) {
    EXPECT_EQ(t.to_vector<float>()[0], 3.0f);
    fill_(t, 2.0f);
    EXPECT_EQ(t.to_vector<float>()[39999], 2.0f);
  }
  EXPECT_EQ(our_shm_names(), before);
}

TEST(ShmSymmetricLifetime, AGroupOfOneGetsOrdinaryZeros) {
  testing::run_on_threads(
      1, dist::make_shm_communicator,
      [](ProcessGroup& group) {
        Tensor t = group.symmetric_zeros({2, 50000});
        EXPECT_EQ(t.shape(), (Shape{2, 50000}));
        EXPECT_TRUE(all_zero(t));
        EXPECT_FALSE(t.impl()->storage->wraps_external());
        fill_(t, 5.0f);
        group.allreduce(t)->wait();
        EXPECT_EQ(t.to_vector<float>()[99999], 5.0f);
      },
      timeout_of(30s));
}

}  // namespace
}  // namespace tessera
