// The shared check of every backend: each collective (and send/recv) at several sizes, compared
// with a serial reference that every rank computes on its own. Inputs are small integers and
// halves, exact in float32 and bfloat16, so results compare with ==. Returns a list of failures
// instead of asserting, so it runs inside threads and in worker processes alike.
//
// run_on_threads() runs one rank per thread, each with its own Communicator and ProcessGroup over
// one shared HashStore: tier 2 of the distributed tests (threads over a real transport).
#pragma once
#include <cmath>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "tessera/core/error.h"
#include "tessera/core/tensor.h"
#include "tessera/ops/ops.h"
#include "tessera/dist/backends/backend.h"
#include "tessera/dist/process_group.h"
#include "tessera/dist/store/hash_store.h"
#include "tessera/dist/store/prefix_store.h"

namespace tessera::testing {

struct SuiteOptions {
  std::vector<int64_t> sizes{0, 1, 7, 1027, 786433};  // 786433 float32 = 3 MiB + 4 bytes
  bool point_to_point = true;                         // false: skip send/recv (backends without them)
};

namespace suite_detail {

// Rank r's i-th input: small exact numbers, different per rank and position.
inline float input_value(int r, int64_t i) { return static_cast<float>(r + 1) * 0.5f + static_cast<float>(i % 13); }
inline int64_t input_int(int r, int64_t i) { return (r + 1) * 1000 + (i % 97); }

inline Tensor float_input(int r, int64_t n) {
  Tensor t = Tensor::empty({n}, DType::Float32);
  float* p = t.data<float>();
  for (int64_t i = 0; i < n; ++i) p[i] = input_value(r, i);
  return t;
}

class Recorder {
 public:
  explicit Recorder(int rank) : rank_(rank) {}
  template <typename T>
  void expect_equal(const std::string& what, const T* got, const std::vector<T>& want) {
    for (size_t i = 0; i < want.size(); ++i) {
      if (!(got[i] == want[i])) {
        failures.push_back(detail::concat("rank ", rank_, ": ", what, " element ", i, " is ", got[i], ", expected ",
                                          want[i]));
        return;
      }
    }
  }
  void fail(const std::string& what, const std::exception& e) {
    failures.push_back(detail::concat("rank ", rank_, ": ", what, " threw: ", e.what()));
  }
  std::vector<std::string> failures;

 private:
  int rank_;
};

template <typename F> void guarded(Recorder& rec, const std::string& what, F f) {
  try {
    f();
  } catch (const std::exception& e) {
    rec.fail(what, e);
  }
}

}  // namespace suite_detail

// Runs every operation of `group` at options.sizes; returns the failures (empty when all pass).
inline std::vector<std::string> run_collective_suite(dist::ProcessGroup& group, const SuiteOptions& options = {}) {
  using namespace suite_detail;
  using dist::ReduceOp;
  const int rank = group.rank(), world = group.size();
  Recorder rec(rank);
  for (int64_t n : options.sizes) {
    std::string at = detail::concat(" (n=", n, ", world=", world, ")");

    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max, ReduceOp::Min}) {
      guarded(rec, "allreduce " + std::string(dist::reduce_op_name(op)) + at, [&] {
        Tensor t = float_input(rank, n);
        group.allreduce(t, op)->wait();
        std::vector<float> want(static_cast<size_t>(n));
        for (int64_t i = 0; i < n; ++i) {
          float acc = input_value(0, i);
          for (int r = 1; r < world; ++r) {
            float v = input_value(r, i);
            acc = op == ReduceOp::Max ? std::max(acc, v) : op == ReduceOp::Min ? std::min(acc, v) : acc + v;
          }
          want[static_cast<size_t>(i)] = op == ReduceOp::Avg ? acc / static_cast<float>(world) : acc;
        }
        rec.expect_equal("allreduce " + std::string(dist::reduce_op_name(op)) + at, t.data<float>(), want);
      });
    }

    guarded(rec, "allreduce int64" + at, [&] {
      Tensor t = Tensor::empty({n}, DType::Int64);
      for (int64_t i = 0; i < n; ++i) t.data<int64_t>()[i] = input_int(rank, i);
      group.allreduce(t, ReduceOp::Max)->wait();
      std::vector<int64_t> want(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) want[static_cast<size_t>(i)] = input_int(world - 1, i);
      rec.expect_equal("allreduce int64 max" + at, t.data<int64_t>(), want);
      for (int64_t i = 0; i < n; ++i) t.data<int64_t>()[i] = input_int(rank, i);
      group.allreduce(t, ReduceOp::Sum)->wait();
      for (int64_t i = 0; i < n; ++i) {
        int64_t s = 0;
        for (int r = 0; r < world; ++r) s += input_int(r, i);
        want[static_cast<size_t>(i)] = s;
      }
      rec.expect_equal("allreduce int64 sum" + at, t.data<int64_t>(), want);
    });

    guarded(rec, "allreduce bfloat16" + at, [&] {
      Tensor t = Tensor::empty({n}, DType::BFloat16);
      for (int64_t i = 0; i < n; ++i) t.data<BFloat16>()[i] = float_to_bf16(static_cast<float>((i + rank) % 5));
      group.allreduce(t, ReduceOp::Sum)->wait();
      std::vector<float> want(static_cast<size_t>(n)), got(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) {
        float s = 0;
        for (int r = 0; r < world; ++r) s += static_cast<float>((i + r) % 5);
        want[static_cast<size_t>(i)] = s;
        got[static_cast<size_t>(i)] = bf16_to_float(t.data<BFloat16>()[i]);
      }
      rec.expect_equal("allreduce bfloat16 sum" + at, got.data(), want);
    });

    for (int root : {0, world - 1}) {
      guarded(rec, detail::concat("broadcast root ", root, at), [&] {
        Tensor t = rank == root ? float_input(root, n) : zeros({n});
        group.broadcast(t, root)->wait();
        std::vector<float> want(static_cast<size_t>(n));
        for (int64_t i = 0; i < n; ++i) want[static_cast<size_t>(i)] = input_value(root, i);
        rec.expect_equal(detail::concat("broadcast root ", root, at), t.data<float>(), want);
      });
    }

    guarded(rec, "reduce" + at, [&] {
      int root = world / 2;
      Tensor t = float_input(rank, n);
      group.reduce(t, ReduceOp::Sum, root)->wait();
      if (rank == root) {
        std::vector<float> want(static_cast<size_t>(n));
        for (int64_t i = 0; i < n; ++i) {
          float s = 0;
          for (int r = 0; r < world; ++r) s += input_value(r, i);
          want[static_cast<size_t>(i)] = s;
        }
        rec.expect_equal("reduce sum" + at, t.data<float>(), want);
      }
    });

    guarded(rec, "allgather" + at, [&] {
      Tensor in = float_input(rank, n);
      Tensor out = zeros({n * world});
      group.allgather(in, out)->wait();
      std::vector<float> want;
      for (int r = 0; r < world; ++r)
        for (int64_t i = 0; i < n; ++i) want.push_back(input_value(r, i));
      rec.expect_equal("allgather" + at, out.data<float>(), want);
    });

    // Unequal: rank r contributes n + r elements, except rank 1 which contributes none.
    auto unequal = [&] {
      std::vector<int64_t> counts;
      for (int r = 0; r < world; ++r) counts.push_back(r == 1 ? 0 : n + r);
      return counts;
    };
    guarded(rec, "allgather unequal" + at, [&] {
      std::vector<int64_t> counts = unequal();
      Tensor in = float_input(rank, counts[static_cast<size_t>(rank)]);
      Tensor out = zeros({std::accumulate(counts.begin(), counts.end(), int64_t{0})});
      group.allgather(in, out, counts)->wait();
      std::vector<float> want;
      for (int r = 0; r < world; ++r)
        for (int64_t i = 0; i < counts[static_cast<size_t>(r)]; ++i) want.push_back(input_value(r, i));
      rec.expect_equal("allgather unequal" + at, out.data<float>(), want);
    });

    guarded(rec, "reduce_scatter" + at, [&] {
      Tensor in = float_input(rank, n * world);
      Tensor out = zeros({n});
      group.reduce_scatter(in, out, ReduceOp::Sum)->wait();
      std::vector<float> want(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) {
        float s = 0;
        for (int r = 0; r < world; ++r) s += input_value(r, rank * n + i);
        want[static_cast<size_t>(i)] = s;
      }
      rec.expect_equal("reduce_scatter" + at, out.data<float>(), want);
    });

    guarded(rec, "reduce_scatter unequal" + at, [&] {
      std::vector<int64_t> counts = unequal();
      int64_t total = std::accumulate(counts.begin(), counts.end(), int64_t{0});
      int64_t offset = std::accumulate(counts.begin(), counts.begin() + rank, int64_t{0});
      Tensor in = float_input(rank, total);
      Tensor out = zeros({counts[static_cast<size_t>(rank)]});
      group.reduce_scatter(in, out, counts, ReduceOp::Max)->wait();
      std::vector<float> want(static_cast<size_t>(counts[static_cast<size_t>(rank)]));
      for (size_t i = 0; i < want.size(); ++i) want[i] = input_value(world - 1, offset + static_cast<int64_t>(i));
      rec.expect_equal("reduce_scatter unequal max" + at, out.data<float>(), want);
    });

    guarded(rec, "alltoall" + at, [&] {
      // Block j of rank r's input holds input_value(r, j * n + i); rank r's output block s holds
      // what rank s sent to r: input_value(s, r * n + i).
      Tensor in = float_input(rank, n * world);
      Tensor out = zeros({n * world});
      group.alltoall(in, out)->wait();
      std::vector<float> want;
      for (int s = 0; s < world; ++s)
        for (int64_t i = 0; i < n; ++i) want.push_back(input_value(s, rank * n + i));
      rec.expect_equal("alltoall" + at, out.data<float>(), want);
    });

    guarded(rec, "barrier" + at, [&] { group.barrier()->wait(); });

    if (options.point_to_point && world > 1) {
      guarded(rec, "send/recv ring" + at, [&] {
        // Every rank sends to the next and receives from the previous, both posted before either
        // is waited on (the pattern that deadlocks when sends block).
        int next = (rank + 1) % world, prev = (rank + world - 1) % world;
        Tensor out = float_input(rank, n);
        Tensor in = zeros({n});
        int tag = static_cast<int>(n % 1000);
        dist::WorkPtr s = group.send(out, next, tag);
        dist::WorkPtr r = group.recv(in, prev, tag);
        s->wait();
        r->wait();
        std::vector<float> want(static_cast<size_t>(n));
        for (int64_t i = 0; i < n; ++i) want[static_cast<size_t>(i)] = input_value(prev, i);
        rec.expect_equal("recv from rank " + std::to_string(prev) + at, in.data<float>(), want);
      });
    }
  }
  return rec.failures;
}

using CommunicatorFactory = std::function<std::unique_ptr<dist::Communicator>(const dist::BackendContext&)>;

// One rank per thread; body(group) on each. Rethrows the first exception a rank threw (after
// every thread has finished, so nothing outlives the call).
inline void run_on_threads(int world, const CommunicatorFactory& make,
                           const std::function<void(dist::ProcessGroup&)>& body,
                           dist::ProcessGroupOptions options = {}) {
  auto store = std::make_shared<dist::HashStore>();
  store->set_timeout(options.timeout);
  std::mutex mu;
  std::exception_ptr first;
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      try {
        dist::BackendContext context;
        context.store = std::make_shared<dist::PrefixStore>("pg", store);
        context.rank = r;
        context.size = world;
        context.local_size = world;
        context.timeout = options.timeout;
        // Owned by a shared_ptr, as init_process_group makes it: the waiting thread may then run an
        // operation itself (Work::wait), as in a real job.
        auto group = std::make_shared<dist::ProcessGroup>(make(context), context.store, options);
        body(*group);
      } catch (...) {
        std::lock_guard lock(mu);
        if (!first) first = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  if (first) std::rethrow_exception(first);
}

// run_collective_suite on every thread; returns all ranks' failures.
inline std::vector<std::string> run_suite_on_threads(int world, const CommunicatorFactory& make,
                                                     const SuiteOptions& suite = {},
                                                     dist::ProcessGroupOptions options = {}) {
  std::mutex mu;
  std::vector<std::string> failures;
  run_on_threads(
      world, make,
      [&](dist::ProcessGroup& group) {
        auto f = run_collective_suite(group, suite);
        std::lock_guard lock(mu);
        failures.insert(failures.end(), f.begin(), f.end());
      },
      options);
  return failures;
}

}  // namespace tessera::testing
