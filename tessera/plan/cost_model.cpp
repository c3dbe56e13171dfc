#include "tessera/plan/cost_model.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <set>
#include <thread>

#include "tessera/core/error.h"
#include "tessera/core/rng.h"
#include "tessera/dist/backends/backend.h"
#include "tessera/dist/store/hash_store.h"
#include "tessera/ops/ops.h"
#include "tessera/parallel/pipeline/schedule.h"
#include "tessera/util/thread_pool.h"

namespace tessera::plan {

namespace {

using tessera::detail::concat;

// Seconds per all-reduce of `bytes` between the two ranks (rank 0's mean over `iterations`).
double time_allreduce(dist::Communicator& comm, size_t bytes, int iterations) {
  std::vector<float> data(bytes / sizeof(float), 1.0f);
  const dist::Buffer buffer{data.data(), static_cast<int64_t>(data.size()), DType::Float32};
  auto deadline = [] { return std::chrono::steady_clock::now() + std::chrono::seconds(60); };
  for (int i = 0; i < 3; ++i) comm.allreduce(buffer, dist::ReduceOp::Sum, deadline());
  comm.barrier(deadline());
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < iterations; ++i) comm.allreduce(buffer, dist::ReduceOp::Sum, deadline());
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / iterations;
}

// Hops a call's algorithm makes one after another (each paying a latency), within a host and across.
struct Hops {
  int64_t within = 0, between = 0;
};

Hops hops_of(const dist::DryCall& call, const HostLayout& layout) {
  const int64_t n = static_cast<int64_t>(call.group.size());
  std::set<int> hosts;
  std::vector<int64_t> per_host(static_cast<size_t>(layout.hosts), 0);
  for (int r : call.group) {
    hosts.insert(layout.host_of(r));
    ++per_host[static_cast<size_t>(layout.host_of(r))];
  }
  const bool across = hosts.size() > 1;
  const std::string& op = call.op;
  if (op == "send") return across ? Hops{0, 1} : Hops{1, 0};
  if (op == "recv" || n == 1) return {};
  if (op == "allreduce" || op == "reduce" || op == "barrier") {
    if (!across) return {2 * (n - 1), 0};
    const int64_t p = *std::max_element(per_host.begin(), per_host.end());
    return {2 * (p - 1), 2 * (static_cast<int64_t>(hosts.size()) - 1)};
  }
  // Rings and chains over flat TCP once the group crosses hosts: every hop is a TCP one.
  return across ? Hops{0, n - 1} : Hops{n - 1, 0};
}

// The call's time for rank `me`: a collective is as slow as its slowest member; a message costs its sender.
double call_seconds(const dist::DryCall& call, int me, const HostLayout& layout, const CostInputs& in) {
  if (call.op == "recv") return 0;  // the sender's cost; a stage's waiting is the bubble's
  auto transfer = [&](int member) {
    const LinkBytes b = bytes_sent(call, member, layout);
    return static_cast<double>(b.within_host) / in.shared_memory.bytes_per_s +
           (b.between_hosts > 0 ? static_cast<double>(b.between_hosts) / in.network.bytes_per_s : 0.0);
  };
  double slowest = 0;
  if (call.op == "send") slowest = transfer(me);
  else
    for (int m : call.group) slowest = std::max(slowest, transfer(m));
  const Hops hops = hops_of(call, layout);
  return static_cast<double>(hops.within) * in.shared_memory.latency_s +
         static_cast<double>(hops.between) * in.network.latency_s + slowest;
}

// The median of the rank's steps after the first (which pays for first calls and allocations).
double steady_step_seconds(const RankPlan& r) {
  std::vector<double> steps(r.step_seconds.begin() + (r.step_seconds.size() > 1 ? 1 : 0), r.step_seconds.end());
  if (steps.empty()) return 0;
  std::sort(steps.begin(), steps.end());
  const size_t n = steps.size();
  return n % 2 ? steps[n / 2] : (steps[n / 2 - 1] + steps[n / 2]) / 2;
}

std::string ms(double seconds) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f ms", seconds * 1e3);
  return buf;
}

}  // namespace

LinkRate calibrate_shared_memory() {
  auto store = std::make_shared<dist::HashStore>(std::chrono::milliseconds(60000));
  constexpr size_t kSmall = 4096, kLarge = 4 << 20;
  double small = 0, large = 0;
  std::exception_ptr failures[2];
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r)
    ranks.emplace_back([&, r] {
      try {
        dist::BackendContext context;
        context.store = store;
        context.rank = r;
        context.size = 2;
        context.local_size = 2;
        context.timeout = std::chrono::milliseconds(60000);
        auto comm = dist::make_shm_communicator(context);
        // The best of three rounds: a round that another process interrupted says nothing of the link.
        double s = 1e9, l = 1e9;
        for (int round = 0; round < 3; ++round) {
          s = std::min(s, time_allreduce(*comm, kSmall, 200));
          l = std::min(l, time_allreduce(*comm, kLarge, 10));
        }
        if (r == 0) {
          small = s;
          large = l;
        }
      } catch (...) {
        failures[r] = std::current_exception();
      }
    });
  for (auto& t : ranks) t.join();
  for (const auto& f : failures)
    if (f) std::rethrow_exception(f);
  LinkRate rate;
  rate.latency_s = small / 2;  // a ring all-reduce of 2 ranks: 2 hops
  // Each rank sends 2(n-1)/n of the buffer: the buffer itself at n = 2.
  rate.bytes_per_s = static_cast<double>(kLarge) / std::max(large - small, 1e-9);
  return rate;
}

namespace {

// Seconds for `rounds` rounds of a training step's two kinds of work at one thread: a 256 x 256
// matmul (compute) and the sum of two 4 MiB tensors (memory traffic).
double time_step_like_work(int rounds) {
  adopt_num_threads();
  Generator gen(7);
  const Tensor a = randn({256, 256}, gen), b = randn({256, 256}, gen), big = randn({1 << 20}, gen);
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < rounds; ++i) {
    Tensor c = matmul(a, b);
    Tensor d = add(big, big);
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

double calibrate_core_sharing() {
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int before = num_threads();
  set_num_threads(1);
  constexpr int kRounds = 40;
  double alone = 1e9, together = 1e9;
  for (int round = 0; round < 3; ++round) {  // the best of three, as for the links
    alone = std::min(alone, time_step_like_work(kRounds));
    std::vector<double> each(static_cast<size_t>(cores));
    std::vector<std::thread> threads;
    for (int t = 0; t < cores; ++t) threads.emplace_back([&, t] { each[static_cast<size_t>(t)] = time_step_like_work(kRounds); });
    for (auto& t : threads) t.join();
    together = std::min(together, *std::max_element(each.begin(), each.end()));
  }
  set_num_threads(before);
  return std::max(1.0, together / alone);
}

StepPrediction predict_step(const JobPlan& plan, const train::TrainConfig& config, const CostInputs& inputs) {
  TESSERA_CHECK(inputs.shared_memory.bytes_per_s > 0, "[plan] no shared-memory rate to predict with");
  TESSERA_CHECK(plan.options.hosts == 1 || inputs.network.bytes_per_s > 0, "[plan] --predict over ",
                plan.options.hosts, " hosts needs the network's rate: give --link GBIT");
  TESSERA_CHECK(inputs.cores_per_host >= 1, "[plan] cores per host must be at least 1");
  const HostLayout layout = plan.layout();
  const std::string step = plan.reported_step();
  const int64_t threads = std::min<int64_t>(config.train.threads > 0 ? config.train.threads : num_threads(),
                                            inputs.cores_per_host);
  StepPrediction p;
  double bubble = 0;
  if (config.parallel.pp > 1) {
    const auto kind = parallel::pipeline::parse_schedule(config.parallel.schedule);
    const int chunks = parallel::pipeline::chunks_per_stage(kind, static_cast<int>(config.parallel.virtual_stages));
    bubble = parallel::pipeline::theoretical_bubble(kind, static_cast<int>(config.parallel.pp),
                                                    config.parallel.microbatches, chunks);
  }
  // A host whose cores are all busy runs each one slower than a lone rank did in the dry run.
  const double slowdown = plan.options.world / plan.options.hosts * threads >= inputs.cores_per_host
                              ? inputs.core_sharing_slowdown
                              : 1.0;
  std::vector<double> computes;  // each rank's, on its host
  for (const RankPlan& r : plan.ranks) computes.push_back(steady_step_seconds(r) * slowdown);
  // Each host's work in core-seconds: its ranks' compute times their threads.
  std::vector<double> host_work(static_cast<size_t>(plan.options.hosts), 0.0);
  for (size_t i = 0; i < plan.ranks.size(); ++i)
    host_work[static_cast<size_t>(layout.host_of(plan.ranks[i].rank))] += computes[i] * static_cast<double>(threads);
  for (size_t i = 0; i < plan.ranks.size(); ++i) {
    const RankPlan& r = plan.ranks[i];
    const double compute = computes[i];
    // A rank's compute ends no sooner than its host's cores can do all the host's work, nor than
    // its pipeline's critical path (its own passes and the bubble's idling) allows; an idle stage's
    // cores go to its neighbours, so the two overlap rather than add.
    const double cores_done = host_work[static_cast<size_t>(layout.host_of(r.rank))] / inputs.cores_per_host;
    const double path_done = bubble > 0 ? compute / (1 - bubble) : compute;
    double communication = 0;
    for (const dist::DryCall& call : r.calls)
      if (call.phase == step) communication += call_seconds(call, r.rank, layout, inputs);
    const double total = std::max(cores_done, path_done) + communication;
    p.rank_step_s.push_back(total);
    if (total > p.step_s) {
      p.step_s = total;
      p.slowest_rank = r.rank;
      p.compute_s = compute;
      p.sharing_s = cores_done > path_done ? cores_done - compute : 0.0;
      p.bubble_s = cores_done > path_done ? 0.0 : path_done - compute;
      p.communication_s = communication;
    }
  }
  return p;
}

CostInputs measured_cost_inputs(double link_gbit, double latency_us, int cores) {
  CostInputs inputs;
  inputs.shared_memory = calibrate_shared_memory();
  inputs.network = {latency_us * 1e-6, link_gbit * 1e9 / 8};
  inputs.cores_per_host = cores > 0 ? cores : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  inputs.core_sharing_slowdown = calibrate_core_sharing();
  return inputs;
}

nlohmann::json prediction_json(const StepPrediction& p) {
  return {{"step_s", p.step_s},       {"slowest_rank", p.slowest_rank}, {"compute_s", p.compute_s},
          {"communication_s", p.communication_s}, {"bubble_s", p.bubble_s}, {"sharing_s", p.sharing_s},
          {"rank_step_s", p.rank_step_s}};
}

std::string prediction_text(const StepPrediction& p, const CostInputs& in) {
  std::string out = concat("\npredicted step: ", ms(p.step_s), " (the slowest, rank ", p.slowest_rank, ": compute ",
                           ms(p.compute_s));
  if (p.sharing_s > 0) out += concat(", waiting for the host's cores ", ms(p.sharing_s));
  if (p.bubble_s > 0) out += concat(", pipeline bubble ", ms(p.bubble_s));
  out += concat(", communication ", ms(p.communication_s));
  char rates[256];
  std::snprintf(rates, sizeof rates, ")\n  from: shared memory %.1f us a hop, %.2f GB/s (measured here)",
                in.shared_memory.latency_s * 1e6, in.shared_memory.bytes_per_s / 1e9);
  out += rates;
  if (in.network.bytes_per_s > 0) {
    std::snprintf(rates, sizeof rates, "; network %.1f us a hop, %.3f GB/s", in.network.latency_s * 1e6,
                  in.network.bytes_per_s / 1e9);
    out += rates;
  }
  char sharing[64];
  std::snprintf(sharing, sizeof sharing, "; %d cores per host, each %.2fx slower when all are busy\n", in.cores_per_host,
                in.core_sharing_slowdown);
  out += sharing;
  return out;
}

}  // namespace tessera::plan
