// `tessera bench tp-overlap`: how much of sequence-parallel tensor parallelism's communication the
// chunked overlap hides (parallel/tensor/sequence_parallel.h), at TP=2 on one machine.
//
// Method: one job of two processes under the launcher (one thread each; the shm backend). Each
// rank cuts the same GPT block (--embed, --heads, dropout 0) three or more ways: plain tensor
// parallelism (Megatron's all-reduces, the whole sequence on every rank), sequence parallelism
// with one chunk (all-gather, then matmul; matmul, then reduce-scatter: nothing overlaps), and
// sequence parallelism with each --chunks count. A forward and backward of a fixed batch (--batch
// sequences of --context tokens) through each variant in turn makes one round (the ranks meet at
// a barrier, untimed, before each pass), so the variants share the machine's drift; --iters timed
// rounds follow --warmup. Per variant: the median pass time [min-max] over the slowest rank, the
// median time the compute thread spent issuing and waiting for the collectives, and the most tensor
// bytes a pass held above those live before it (activations, gradients, buffers).
//   hidden: (pass time with one chunk - pass time with K) / the communication time with one chunk,
//   the share of the communication the overlap took off the pass.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <unistd.h>

#include "bench/bench.h"
#include "bench/test_hosts.h"
#include "tessera/core/cpu_allocator.h"
#include "tessera/dist/init.h"
#include "tessera/dist/launcher/launcher.h"
#include "tessera/dist/store/store_from_env.h"
#include "tessera/nn/transformer.h"
#include "tessera/ops/ops.h"
#include "tessera/parallel/tensor/parallel_transformer_block.h"

namespace tessera::bench {

namespace {

using Clock = std::chrono::steady_clock;
const dist::Milliseconds kTpOverlapBenchTimeout{600000};

struct Variant {
  std::string name;
  bool sequence = false;
  int64_t chunks = 1;
  std::shared_ptr<parallel::tensor::ParallelTransformerBlock> block;
  std::vector<double> seconds, comm_seconds;
  int64_t peak_bytes = 0;  // the most tensor bytes a pass held above what was live before it
};

int run_worker(const TpOverlapBenchOptions& o) {
  dist::InitOptions init;
  init.timeout = kTpOverlapBenchTimeout;
  auto group = dist::init_process_group(init);
  const int rank = group->rank(), world = group->size();
  manual_seed(7);
  nn::TransformerBlock full(o.embed, o.heads);
  std::vector<Variant> variants;
  variants.push_back({"TP (all-reduce)", false, 1, nullptr, {}, {}});
  variants.push_back({"SP, 1 chunk", true, 1, nullptr, {}, {}});
  for (const std::string& k : split_list(o.chunks))
    variants.push_back({"SP, " + k + " chunks", true, std::stoll(k), nullptr, {}, {}});
  for (Variant& v : variants)
    v.block = std::make_shared<parallel::tensor::ParallelTransformerBlock>(
        full, group, parallel::tensor::SequenceParallel{v.sequence, v.chunks});
  Generator gen(11);
  const Tensor x = randn({o.batch, o.context, o.embed}, gen), g = randn({o.batch, o.context, o.embed}, gen);
  const int64_t local = o.context / world;
  const Tensor x_mine = contiguous(x.slice(1, rank * local, (rank + 1) * local));
  const Tensor g_mine = contiguous(g.slice(1, rank * local, (rank + 1) * local));
  for (int i = 0; i < o.warmup + o.iters; ++i) {
    for (Variant& v : variants) {
      v.block->zero_grad();
      Tensor input = (v.sequence ? x_mine : x).clone().set_requires_grad(true);
      parallel::tensor::TensorParallelCommTally tally;
      group->blocking_barrier();
      const int64_t live = static_cast<int64_t>(cpu_allocator::allocated_bytes());
      cpu_allocator::reset_peak_allocated_bytes();
      const auto t0 = Clock::now();
      {
        parallel::tensor::TensorParallelCommTallyScope scope(&tally);
        sum(mul(v.block->forward(input), v.sequence ? g_mine : g)).backward();
      }
      const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
      v.peak_bytes = std::max(v.peak_bytes, static_cast<int64_t>(cpu_allocator::peak_allocated_bytes()) - live);
      if (i >= o.warmup) v.seconds.push_back(seconds), v.comm_seconds.push_back(tally.exposed_seconds);
    }
  }
  auto store = dist::store_from_env(kTpOverlapBenchTimeout);
  nlohmann::json mine = nlohmann::json::array();
  for (const Variant& v : variants)
    mine.push_back({{"name", v.name}, {"seconds", v.seconds}, {"comm", v.comm_seconds}, {"peak", v.peak_bytes}});
  store->set("bench/tpo/" + std::to_string(rank), mine.dump());
  if (rank == 0) {
    // Per variant and round, the slowest rank's pass, and the communication time of that rank.
    nlohmann::json out = nlohmann::json::array();
    std::vector<nlohmann::json> ranks;
    for (int r = 0; r < world; ++r) ranks.push_back(nlohmann::json::parse(store->get_string("bench/tpo/" + std::to_string(r))));
    for (size_t v = 0; v < variants.size(); ++v) {
      std::vector<double> seconds, comm;
      int64_t peak = 0;
      for (int r = 0; r < world; ++r) peak = std::max(peak, ranks[r][v]["peak"].get<int64_t>());
      for (int i = 0; i < o.iters; ++i) {
        double slowest = 0, its_comm = 0;
        for (int r = 0; r < world; ++r) {
          const double s = ranks[r][v]["seconds"][i].get<double>();
          if (s >= slowest) slowest = s, its_comm = ranks[r][v]["comm"][i].get<double>();
        }
        seconds.push_back(slowest);
        comm.push_back(its_comm);
      }
      out.push_back({{"name", variants[v].name}, {"chunks", variants[v].chunks}, {"sequence", variants[v].sequence},
                     {"median_s", median(seconds)},
                     {"min_s", *std::min_element(seconds.begin(), seconds.end())},
                     {"max_s", *std::max_element(seconds.begin(), seconds.end())},
                     {"comm_s", median(comm)}, {"peak_bytes", peak}});
    }
    std::printf("%s\n", nlohmann::json{{"variants", out}}.dump().c_str());
  }
  group->blocking_barrier();  // rank 0 reads the store before anyone leaves
  return 0;
}

}  // namespace

int tp_overlap(const TpOverlapBenchOptions& o) {
  if (o.worker) return run_worker(o);
  TESSERA_CHECK(o.context % 2 == 0 && o.heads % 2 == 0, "[bench tp-overlap] --context and --heads must be even (TP=2)");
  std::printf("tessera bench tp-overlap: a GPT block (embed %lld, %lld heads), batch %lld x context %lld, TP=2 on one "
              "machine, 1 thread per process, forward + backward; %d timed rounds after %d, the variants in turn\n\n",
              static_cast<long long>(o.embed), static_cast<long long>(o.heads), static_cast<long long>(o.batch),
              static_cast<long long>(o.context), o.iters, o.warmup);
  std::fflush(stdout);
  char path[] = "/tmp/tessera_bench_tpo_XXXXXX";
  const int fd = mkstemp(path);
  TESSERA_CHECK(fd >= 0, "[bench tp-overlap] cannot make a temporary file for the job's output");
  dist::launcher::LaunchOptions launch;
  launch.nproc_per_node = 2;
  launch.threads_per_worker = 1;
  launch.stdout_fd = fd;
  launch.timeout = std::chrono::seconds(900);
  launch.command = {std::filesystem::read_symlink("/proc/self/exe").string(), "bench", "tp-overlap", "--worker",
                    "--embed", std::to_string(o.embed), "--heads", std::to_string(o.heads),
                    "--context", std::to_string(o.context), "--batch", std::to_string(o.batch),
                    "--chunks", o.chunks, "--iters", std::to_string(o.iters), "--warmup", std::to_string(o.warmup)};
  auto result = dist::launcher::launch(launch);
  ::close(fd);
  const std::string text = read_all(path);
  std::remove(path);
  if (result.exit_code != 0) {
    std::fprintf(stderr, "bench tp-overlap: the job failed: %s\n%s", result.message.c_str(), text.c_str());
    return 1;
  }
  const nlohmann::json j = last_json_line(text);
  double one_chunk_s = 0, one_chunk_comm_s = 0;
  for (const auto& v : j["variants"])
    if (v["sequence"].get<bool>() && v["chunks"].get<int64_t>() == 1)
      one_chunk_s = v["median_s"].get<double>(), one_chunk_comm_s = v["comm_s"].get<double>();
  std::printf("| variant | pass ms, median [min-max] | communication ms (issued and waited for) | hidden | peak MiB "
              "per rank above the weights |\n|---|---|---|---|---|\n");
  for (const auto& v : j["variants"]) {
    std::string hidden = "—";
    if (v["sequence"].get<bool>() && v["chunks"].get<int64_t>() > 1 && one_chunk_comm_s > 0) {
      char cell[32];
      std::snprintf(cell, sizeof cell, "%.0f%%", 100.0 * (one_chunk_s - v["median_s"].get<double>()) / one_chunk_comm_s);
      hidden = cell;
    }
    std::printf("| %s | %.2f [%.2f-%.2f] | %.2f | %s | %.1f |\n", v["name"].get<std::string>().c_str(),
                1e3 * v["median_s"].get<double>(), 1e3 * v["min_s"].get<double>(), 1e3 * v["max_s"].get<double>(),
                1e3 * v["comm_s"].get<double>(), hidden.c_str(), v["peak_bytes"].get<double>() / (1 << 20));
  }
  return 0;
}

}  // namespace tessera::bench
