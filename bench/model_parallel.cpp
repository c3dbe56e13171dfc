// `tessera bench model-parallel`: the pipeline bubble against theory, peak memory per rank, and
// tokens/s for each layout of the model-parallel trainer (tessera/train/mesh_strategy.h).
//
// Method: every measurement is a fresh job under the launcher, one thread per process, training a
// GPT-style transformer (--embed, --layers, --heads, context --context; the fortunes vocabulary)
// with AdamW on a fixed random batch of --batch sequences per replica: `warmup` untimed steps, then
// `steps` timed ones, through Trainer::train_step (the code path of `tessera train`).
//   bubble: per stage, 1 - compute/wall of each step, where compute is the step's wall time minus
//     the time blocked receiving from or sending to a neighbour (pipeline_stage.h); the mean over
//     stages and timed steps, against the schedule's theory (schedule.h: (P-1)/(M+P-1) for GPipe
//     and 1F1B, (P-1)/(vM+P-1) interleaved, (P-1)/(3M+P-1) for ZB-H1, (P-1)/(6M+P-1) for ZB-V).
//   p2p message: after the timed steps, stages 0 and 1 bounce one micro-batch's activation
//     (header and payload, as the pipeline sends it) 20 times; half the mean round trip is the
//     one-way cost every forward and backward message pays.
//   peak memory: the most bytes live tensors held at once on each rank during training (the
//     allocator's counter, reset after the model is built and cut, so it covers parameters,
//     gradients, AdamW state and activations), and the process's peak RSS.
//   tokens/s: batch × context × replicas × steps / the slowest rank's time.
// On this 2-core machine a 4-process layout oversubscribes the cores; its rates say more about
// contention than about the layout.
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <sstream>

#include "bench/bench.h"
#include "tessera/core/cpu_allocator.h"
#include "tessera/dist/init.h"
#include "tessera/dist/launcher/env.h"
#include "tessera/dist/launcher/launcher.h"
#include "tessera/dist/store/store_from_env.h"
#include "tessera/ops/ops.h"
#include "tessera/parallel/pipeline/schedule.h"
#include "tessera/train/mesh_strategy.h"
#include "tessera/train/trainer.h"

namespace tessera::bench {

namespace {

using Clock = std::chrono::steady_clock;
const dist::Milliseconds kModelParallelBenchTimeout{600000};

train::TrainConfig config_of(const ModelParallelBenchOptions& o) {
  train::TrainConfig c;
  c.model.name = "transformer";
  c.model.embed_dim = o.embed;
  c.model.layers = o.layers;
  c.model.heads = o.heads;
  c.model.context = o.context;
  c.model.dropout = 0.0;
  c.data.dataset = "text";
  c.optimizer.name = "adamw";
  c.train.batch_size = o.batch;
  c.train.threads = 1;
  c.train.output_dir = "/tmp/tessera_bench_model_parallel";
  c.distributed.strategy = "mesh";  // also for the layouts with pp = tp = 1
  c.parallel.dp = o.dp;
  c.parallel.pp = o.pp;
  c.parallel.tp = o.tp;
  c.parallel.sequence_parallel = o.sequence_parallel;
  c.parallel.schedule = o.schedule;
  c.parallel.microbatches = o.microbatches;
  c.parallel.virtual_stages = o.schedule == "interleaved" ? o.virtual_stages : 1;
  return c;
}

int64_t peak_rss_bytes() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<int64_t>(u.ru_maxrss) * 1024;
}

int run_worker(const ModelParallelBenchOptions& o) {
  dist::InitOptions init;
  init.timeout = kModelParallelBenchTimeout;
  auto world = dist::init_process_group(init);
  train::Trainer trainer(config_of(o), world);
  const auto& mesh = dynamic_cast<const train::MeshStrategy&>(trainer.strategy());
  cpu_allocator::reset_peak_allocated_bytes();
  Generator gen(1234 + mesh.mesh().coordinates().dp);  // replicas read different batches
  const int64_t vocab = static_cast<int64_t>(trainer.vocabulary()->size());
  Tensor inputs = randint(0, vocab, {o.batch, o.context}, gen), targets = randint(0, vocab, {o.batch, o.context}, gen);
  const data::Batch batch{inputs, targets};
  for (int i = 0; i < o.warmup; ++i) trainer.train_step(batch);
  double bubble = 0, seconds = 0, forward_s = 0, backward_s = 0, weight_s = 0;
  int64_t peak_activations = 0;
  for (int i = 0; i < o.steps; ++i) {
    auto t0 = Clock::now();
    trainer.train_step(batch);
    seconds += std::chrono::duration<double>(Clock::now() - t0).count();
    const auto& step = mesh.last_step();
    bubble += step.bubble_fraction();
    forward_s += step.forward_seconds;
    backward_s += step.backward_seconds;
    weight_s += step.weight_seconds;
    peak_activations = std::max(peak_activations, step.peak_activations);
  }
  // One pass of one micro-batch through one of this stage's chunks, by kind.
  const int chunks = mesh.stage().chunks();
  const double passes = static_cast<double>(o.steps) * static_cast<double>(o.microbatches) * chunks;
  // The one-way cost of one micro-batch's activation between stages 0 and 1.
  double p2p_one_way_us = 0;
  int64_t p2p_bytes = 0;
  if (o.pp > 1 && mesh.mesh().pp_group()->rank() < 2) {
    const auto& group = mesh.mesh().pp_group();
    const int s = group->rank();
    parallel::pipeline::StageLink link(group);
    Tensor x = zeros({o.batch / o.microbatches, o.context, o.embed});
    p2p_bytes = x.numel() * static_cast<int64_t>(sizeof(float));
    constexpr int kWarmup = 3, kRounds = 20;
    Clock::time_point t0;
    for (int i = 0; i < kWarmup + kRounds; ++i) {
      if (i == kWarmup) t0 = Clock::now();
      if (s == 0) {
        link.send_tensor(x, 1, 2 * i);
        link.wait_sends();
        link.recv_tensor(1, 2 * i + 1, "the p2p probe's reply");
      } else {
        Tensor y = link.recv_tensor(0, 2 * i, "the p2p probe");
        link.send_tensor(y, 0, 2 * i + 1);
        link.wait_sends();
      }
    }
    p2p_one_way_us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / kRounds / 2;
  }
  // Every rank posts its figures; rank 0 prints the job's line.
  auto store = dist::store_from_env(kModelParallelBenchTimeout);
  const int rank = world->rank(), size = world->size();
  nlohmann::json mine{{"rank", rank},
                      {"stage", mesh.stage().stage()},
                      {"bubble", bubble / o.steps},
                      {"pass_seconds", {forward_s / passes, backward_s / passes, weight_s / passes}},
                      {"seconds", seconds},
                      {"peak_tensor_bytes", cpu_allocator::peak_allocated_bytes()},
                      {"peak_rss_bytes", peak_rss_bytes()},
                      {"peak_activations", peak_activations},
                      {"p2p_one_way_us", p2p_one_way_us},
                      {"p2p_bytes", p2p_bytes}};
  store->set("bench/mp/" + std::to_string(rank), mine.dump());
  if (rank == 0) {
    nlohmann::json ranks = nlohmann::json::array();
    double slowest = 0, bubble_sum = 0;
    std::vector<bool> stage_seen(mesh.mesh().shape().pp, false);
    std::vector<parallel::pipeline::PassTimes> pass_times(stage_seen.size());
    int stages_counted = 0;
    for (int r = 0; r < size; ++r) {
      auto j = nlohmann::json::parse(store->get_string("bench/mp/" + std::to_string(r)));
      slowest = std::max(slowest, j["seconds"].get<double>());
      const int s = j["stage"].get<int>();
      if (!stage_seen[s]) {
        stage_seen[s] = true, bubble_sum += j["bubble"].get<double>(), ++stages_counted;
        const auto& t = j["pass_seconds"];
        pass_times[s] = {t[0].get<double>(), t[1].get<double>(), t[2].get<double>()};
      }
      ranks.push_back(j);
    }
    const double tokens = static_cast<double>(o.batch * o.context) * mesh.mesh().shape().dp * o.steps;
    // The bubble these passes would leave with messages that cost nothing (schedule.h).
    const double simulated = parallel::pipeline::simulated_bubble(parallel::pipeline::parse_schedule(o.schedule),
                                                                  o.microbatches, chunks, pass_times);
    std::printf("%s\n", nlohmann::json{{"tokens_per_s", tokens / slowest},
                                       {"bubble", bubble_sum / stages_counted},
                                       {"simulated_bubble", simulated},
                                       {"ranks", ranks}}.dump().c_str());
  }
  world->blocking_barrier();  // rank 0 reads the store before anyone leaves
  return 0;
}

nlohmann::json run_job(ModelParallelBenchOptions o, int dp, int pp, int tp, const std::string& schedule, int64_t m,
                       bool sequence_parallel = false) {
  std::fflush(stdout);  // the table so far, before the job's processes write
  char path[] = "/tmp/tessera_bench_mp_XXXXXX";
  int fd = mkstemp(path);
  if (fd < 0) return nullptr;
  dist::launcher::LaunchOptions launch;
  launch.nproc_per_node = dp * pp * tp;
  launch.threads_per_worker = 1;
  launch.stdout_fd = fd;
  launch.timeout = std::chrono::seconds(900);
  launch.command = {std::filesystem::read_symlink("/proc/self/exe").string(), "bench", "model-parallel", "--worker",
                    "--dp", std::to_string(dp), "--pp", std::to_string(pp), "--tp", std::to_string(tp),
                    "--schedule", schedule, "--microbatches", std::to_string(m), "--batch", std::to_string(o.batch),
                    "--embed", std::to_string(o.embed), "--layers", std::to_string(o.layers),
                    "--heads", std::to_string(o.heads), "--context", std::to_string(o.context),
                    "--steps", std::to_string(o.steps), "--warmup", std::to_string(o.warmup),
                    "--virtual-stages", std::to_string(o.virtual_stages)};
  if (sequence_parallel) launch.command.push_back("--sequence-parallel");
  auto result = dist::launcher::launch(launch);
  ::close(fd);
  std::string out = read_all(path);
  std::remove(path);
  if (result.exit_code != 0) {
    std::fprintf(stderr, "bench model-parallel: the dp %d pp %d tp %d job failed: %s\n%s", dp, pp, tp,
                 result.message.c_str(), out.c_str());
    return nullptr;
  }
  return last_json_line(out);
}

std::string mib(double bytes) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f", bytes / (1 << 20));
  return b;
}

}  // namespace

int model_parallel(const ModelParallelBenchOptions& o) {
  if (o.worker) return run_worker(o);
  std::printf("tessera bench model-parallel: transformer embed %lld, %lld layers, %lld heads, context %lld, batch %lld "
              "per replica, AdamW, 1 thread per process, %d timed steps after %d\n\n",
              static_cast<long long>(o.embed), static_cast<long long>(o.layers), static_cast<long long>(o.heads),
              static_cast<long long>(o.context), static_cast<long long>(o.batch), o.steps, o.warmup);
  int failures = 0;
  // 1. The bubble of each schedule against its theory.
  const int P = o.bubble_stages;
  std::vector<std::pair<std::string, parallel::pipeline::ScheduleKind>> schedules;  // parsed before any job runs
  {
    std::stringstream ss(o.schedules);
    for (std::string item; std::getline(ss, item, ',');) schedules.emplace_back(item, parallel::pipeline::parse_schedule(item));
  }
  std::printf("Pipeline bubble, PP=%d (mean idle fraction of the stages' steps; in brackets the schedule's theory with "
              "equal passes, then simulated with this run's measured pass times and free messages (schedule.h: "
              "simulated_bubble); interleaved with v=%lld chunks per stage)\n",
              P, static_cast<long long>(o.virtual_stages));
  std::printf("| M |");
  for (const auto& [name, kind] : schedules) std::printf(" %s |", name.c_str());
  std::printf(" measured / theory (/ simulated) | each stage's passes F / B / W ms | peak (chunk, micro-batch) activations held on stage 0 | "
              "p2p message: bytes, one-way µs |\n|---|");
  for (size_t i = 0; i < schedules.size(); ++i) std::printf("---|");
  std::printf("---|---|---|---|\n");
  std::stringstream ms(o.bubble_microbatches);
  for (std::string item; std::getline(ms, item, ',');) {
    const int64_t m = std::stoll(item);
    std::string cells, ratios, peaks, p2p, passes;
    for (const auto& [name, kind] : schedules) {
      const int v = parallel::pipeline::chunks_per_stage(kind, static_cast<int>(o.virtual_stages));
      if (kind == parallel::pipeline::ScheduleKind::Interleaved && m % P != 0) {
        cells += " — |";  // Megatron's order needs M a multiple of P
        continue;
      }
      nlohmann::json j = run_job(o, 1, P, 1, name, m);
      if (j.is_null()) {
        ++failures;
        cells += " failed |";
        continue;
      }
      const double theory = parallel::pipeline::theoretical_bubble(kind, P, m, v), got = j["bubble"].get<double>();
      const double simulated = j["simulated_bubble"].get<double>();
      char cell[128];
      std::snprintf(cell, sizeof cell, " %.3f (%.3f; %.3f) |", got, theory, simulated);
      cells += cell;
      std::snprintf(cell, sizeof cell, "%s%s %.2f× (/ %.2f×)", ratios.empty() ? "" : ", ", name.c_str(),
                    theory > 0 ? got / theory : 0.0, simulated > 0 ? got / simulated : 0.0);
      ratios += cell;
      passes += (passes.empty() ? "" : ", ") + name;
      for (size_t r = 0; r < j["ranks"].size(); ++r) {  // stage by stage: their imbalance is bubble no order removes
        const auto& t = j["ranks"][r]["pass_seconds"];
        std::snprintf(cell, sizeof cell, "%s%.2f / %.2f / %.2f", r == 0 ? " " : " ; ", 1e3 * t[0].get<double>(),
                      1e3 * t[1].get<double>(), 1e3 * t[2].get<double>());
        passes += cell;
      }
      std::snprintf(cell, sizeof cell, "%s%lld", peaks.empty() ? "" : " / ", j["ranks"][0]["peak_activations"].get<long long>());
      peaks += cell;
      if (p2p.empty()) {
        std::snprintf(cell, sizeof cell, "%lld B, %.1f µs", j["ranks"][0]["p2p_bytes"].get<long long>(),
                      j["ranks"][0]["p2p_one_way_us"].get<double>());
        p2p = cell;
      }
    }
    std::printf("| %lld |%s %s | %s | %s | %s |\n", static_cast<long long>(m), cells.c_str(), ratios.c_str(),
                passes.c_str(), peaks.c_str(), p2p.c_str());
  }
  if (o.no_layouts) return failures ? 1 : 0;
  // 2. Memory and 3. throughput per layout.
  struct Layout {
    const char* name;
    int dp, pp, tp;
    const char* schedule;
    int64_t m;
    bool sequence_parallel = false;
  };
  // "1 process, M=8" separates what micro-batching alone saves (activations of 1/M of the batch at a
  // time, as gradient accumulation) from what splitting the model saves.
  const Layout layouts[] = {{"1 process", 1, 1, 1, "1f1b", 1},   {"1 process, M=8", 1, 1, 1, "1f1b", 8},
                            {"PP=2 GPipe", 1, 2, 1, "gpipe", 8},
                            {"PP=2 1F1B", 1, 2, 1, "1f1b", 8},
                            {"PP=2 interleaved (v=2)", 1, 2, 1, "interleaved", 8},
                            {"PP=2 ZB-H1", 1, 2, 1, "zb-h1", 8},
                            {"PP=2 ZB-V", 1, 2, 1, "zb-v", 8},   {"TP=2", 1, 1, 2, "1f1b", 1},
                            {"TP=2, sequence parallel", 1, 1, 2, "1f1b", 1, true},
                            {"DP=2", 2, 1, 1, "1f1b", 1},        {"DP=2 x PP=2", 2, 2, 1, "1f1b", 8},
                            {"DP=2 x TP=2", 2, 1, 2, "1f1b", 1}};
  std::printf("\nPer layout (M = micro-batches; peak tensor MiB and peak RSS MiB per rank)\n");
  std::printf("| layout | processes | M | tokens/s | peak tensor MiB per rank | peak RSS MiB per rank | bubble |\n"
              "|---|---|---|---|---|---|---|\n");
  for (const Layout& l : layouts) {
    nlohmann::json j = run_job(o, l.dp, l.pp, l.tp, l.schedule, l.m, l.sequence_parallel);
    if (j.is_null()) {
      ++failures;
      continue;
    }
    std::string tensors, rss;
    for (const auto& r : j["ranks"]) {
      tensors += (tensors.empty() ? "" : " / ") + mib(r["peak_tensor_bytes"].get<double>());
      rss += (rss.empty() ? "" : " / ") + mib(r["peak_rss_bytes"].get<double>());
    }
    std::printf("| %s | %d | %lld | %.0f | %s | %s | %.3f |\n", l.name, l.dp * l.pp * l.tp, static_cast<long long>(l.m),
                j["tokens_per_s"].get<double>(), tensors.c_str(), rss.c_str(), j["bubble"].get<double>());
  }
  return failures ? 1 : 0;
}

}  // namespace tessera::bench
