// The gloo backend over threads (tier 2): one rank per thread, real TCP connections on loopback,
// every collective and send/recv against the serial reference; plus subgroups, send/recv posted
// from another thread while collectives run, and gloo's error messages read as ours.
#include <gtest/gtest.h>

#include <climits>
#include <cstdlib>
#include <stdexcept>

#include "dist/collective_suite.h"
#include "tessera/dist/backends/gloo/gloo_errors.h"
#include "tessera/dist/backends/gloo/gloo_rendezvous.h"

namespace tessera {
namespace {

using dist::ProcessGroup;
using dist::ReduceOp;

std::string joined(const std::vector<std::string>& failures) {
  std::string s;
  for (const auto& f : failures) s += f + "\n";
  return s;
}

dist::ProcessGroupOptions short_timeout() {
  dist::ProcessGroupOptions o;
  o.timeout = std::chrono::seconds(60);  // a failing test fails instead of hanging
  return o;
}

class GlooCollectives : public ::testing::TestWithParam<int> {};

TEST_P(GlooCollectives, EveryCollectiveMatchesTheSerialReference) {
  auto failures =
      testing::run_suite_on_threads(GetParam(), dist::make_gloo_communicator, testing::SuiteOptions{}, short_timeout());
  EXPECT_TRUE(failures.empty()) << joined(failures);
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, GlooCollectives, ::testing::Values(1, 2, 3, 4, 8),
                         [](const auto& info) { return "world_" + std::to_string(info.param); });

TEST(GlooSubgroups, SplitGroupsRunTheSuiteOnTheirOwnConnections) {
  std::mutex mu;
  std::vector<std::string> failures;
  testing::run_on_threads(
      4, dist::make_gloo_communicator,
      [&](ProcessGroup& group) {
        auto odd = group.new_group({3, 1});
        auto first_three = group.new_group({0, 1, 2});
        std::vector<std::string> mine;
        testing::SuiteOptions small;
        small.sizes = {0, 5, 1025};
        if (odd) {
          EXPECT_EQ(odd->size(), 2);
          EXPECT_EQ(odd->rank(), group.rank() == 1 ? 0 : 1);
          EXPECT_EQ(odd->global_ranks(), (std::vector<int>{1, 3}));
          auto f = testing::run_collective_suite(*odd, small);
          mine.insert(mine.end(), f.begin(), f.end());
        }
        if (first_three) {
          auto f = testing::run_collective_suite(*first_three, small);
          mine.insert(mine.end(), f.begin(), f.end());
        }
        // The parent still works after its children were made.
        auto f = testing::run_collective_suite(group, small);
        mine.insert(mine.end(), f.begin(), f.end());
        std::lock_guard lock(mu);
        failures.insert(failures.end(), mine.begin(), mine.end());
      },
      short_timeout());
  EXPECT_TRUE(failures.empty()) << joined(failures);
}

TEST(GlooPointToPoint, TagsMatchRegardlessOfPostingOrder) {
  testing::run_on_threads(
      2, dist::make_gloo_communicator,
      [](ProcessGroup& group) {
        const std::vector<int> tags = {0, 7, INT_MAX};
        if (group.rank() == 0) {
          std::vector<Tensor> out;
          std::vector<dist::WorkPtr> works;
          for (int tag : tags) {
            out.push_back(full({3}, static_cast<float>(tag % 1000)));
            works.push_back(group.send(out.back(), 1, tag));
          }
          for (auto& w : works) w->wait();
        } else {
          // Posted in the opposite order: each recv still gets the message with its tag.
          std::vector<Tensor> in;
          std::vector<dist::WorkPtr> works;
          for (auto it = tags.rbegin(); it != tags.rend(); ++it) {
            in.push_back(zeros({3}));
            works.push_back(group.recv(in.back(), 0, *it));
          }
          for (size_t i = 0; i < works.size(); ++i) {
            works[i]->wait();
            EXPECT_EQ(in[i].to_vector<float>(), std::vector<float>(3, static_cast<float>(tags[2 - i] % 1000)));
          }
        }
      },
      short_timeout());
}

TEST(GlooPointToPoint, SendsFromAnotherThreadOverlapCollectives) {
  // A pipeline schedule posts send/recv from its own thread while the group's worker runs
  // collectives; both must complete and neither may see the other's bytes.
  testing::run_on_threads(
      3, dist::make_gloo_communicator,
      [](ProcessGroup& group) {
        const int rank = group.rank(), world = group.size();
        std::thread p2p([&] {
          for (int i = 0; i < 20; ++i) {
            Tensor out = full({1000}, static_cast<float>(rank * 100 + i));
            Tensor in = zeros({1000});
            auto s = group.send(out, (rank + 1) % world, i);
            auto r = group.recv(in, (rank + world - 1) % world, i);
            s->wait();
            r->wait();
            EXPECT_EQ(in.to_vector<float>()[999], static_cast<float>(((rank + world - 1) % world) * 100 + i));
          }
        });
        for (int i = 0; i < 20; ++i) {
          Tensor t = full({4097}, 1.0f);
          group.allreduce(t)->wait();
          EXPECT_EQ(t.to_vector<float>()[4096], static_cast<float>(world));
        }
        p2p.join();
      },
      short_timeout());
}

TEST(GlooCollectives, BFloat16MaxAndMinUseTheSharedKernel) {
  testing::run_on_threads(
      3, dist::make_gloo_communicator,
      [](ProcessGroup& group) {
        for (ReduceOp op : {ReduceOp::Max, ReduceOp::Min}) {
          Tensor t = full({33}, static_cast<float>(group.rank()) - 1.0f, DType::BFloat16);
          group.allreduce(t, op)->wait();
          float want = op == ReduceOp::Max ? 1.0f : -1.0f;
          for (int64_t i = 0; i < 33; ++i) EXPECT_EQ(bf16_to_float(t.data<BFloat16>()[i]), want);
        }
      },
      short_timeout());
}

TEST(GlooRendezvous, BindsLoopbackWhenEveryRankIsLocal) {
  EXPECT_EQ(dist::detail::gloo_bind_host(4, 4), "127.0.0.1");
  EXPECT_EQ(dist::detail::gloo_bind_host(0, 1), "127.0.0.1");
  ::setenv("TESSERA_GLOO_HOST", "198.18.2.3", 1);
  EXPECT_EQ(dist::detail::gloo_bind_host(2, 4), "198.18.2.3");
  EXPECT_EQ(dist::detail::gloo_bind_host(4, 4), "127.0.0.1");
  ::unsetenv("TESSERA_GLOO_HOST");
  EXPECT_FALSE(dist::detail::gloo_bind_host(0, 4).empty());  // this machine's hostname
}

TEST(GlooErrors, MessagesDecideTheType) {
  using dist::detail::GlooFailure;
  auto kind = [](const char* what) { return dist::detail::classify_gloo_error(std::runtime_error(what)).kind; };
  EXPECT_EQ(kind("[/build/gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting 1000ms for recv operation "
                 "to complete"),
            GlooFailure::Timeout);
  EXPECT_EQ(kind("[gloo/transport/tcp/pair.cc:598] Connection closed by peer [127.0.0.1]:4040"),
            GlooFailure::PeerGone);
  EXPECT_EQ(kind("[pair.cc:575] Read error [127.0.0.1]:4040: Connection reset by peer"), GlooFailure::PeerGone);
  EXPECT_EQ(kind("Application timeout caused pair closure"), GlooFailure::Timeout);
  EXPECT_EQ(kind("Connect timeout [127.0.0.1]:4040"), GlooFailure::Timeout);
  EXPECT_EQ(kind("[enforce fail at gloo/allreduce.cc:12] opts.elementSize > 0"), GlooFailure::Other);
  auto error = dist::detail::classify_gloo_error(std::runtime_error("[/a/b/pair.cc:598] Socket closed"));
  EXPECT_EQ(error.message, "Socket closed");
}

}  // namespace
}  // namespace tessera
