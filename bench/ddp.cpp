// `tessera bench ddp`: data-parallel training throughput, N processes × 1 thread, beside PyTorch 1.13's
// DistributedDataParallel over gloo (bench/torch_ddp.py) in the same run, and how much of the
// all-reduce time DDP hid behind backward.
//
// Method: per model and repeat, tessera and PyTorch run alternately (so drift on this shared machine
// hits both), each with N fresh processes of one thread, the same model, SGD(momentum 0.9), a fixed
// random per-process batch, `warmup` untimed steps, then `steps` timed ones; samples/s is global
// (N × batch × steps over the slowest rank's time). The hidden fraction comes from the reducer's
// per-iteration trace (reducer.h): 1 − (time backward waited for communication) / (time the group's
// thread spent communicating), averaged over the timed steps. "1 process" is the same model and
// global batch (N × batch) in one process of one thread without DDP, run in the same rotation:
// scaling = DDP's samples/s over it (the target is 1.6× for 2 processes). "after start" is
// the part of comm ms after the last rank started each all-reduce (after_last_start_ms: the rest is
// waiting for a slower rank's backward), "alone ms" the same buckets' all-reduces per step with no
// backward beside them (buckets_alone_seconds), and busbw/alone the all-reduce's bus bandwidth
// inside DDP as a share of that alone (the same bytes: alone ms / after start); the last two only
// for the plain all-reduce hook.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <unistd.h>

#include "bench/bench.h"
#include "tessera/core/rng.h"
#include "tessera/dist/init.h"
#include "tessera/dist/launcher/launcher.h"
#include "tessera/nn/char_transformer.h"
#include "tessera/nn/models.h"
#include "tessera/ops/ops.h"
#include "tessera/optim/sgd.h"
#include "tessera/parallel/ddp/distributed_data_parallel.h"
#include "tessera/util/task_progress.h"

namespace tessera::bench {

namespace {

using Clock = std::chrono::steady_clock;
constexpr int kTorchTimeoutSeconds = 600;

// The GPT-style model of `bench model-parallel` at its defaults (embed 128, 4 layers, 4 heads,
// context 64) over a 96-symbol vocabulary: 826k parameters, a batch of `batch` sequences.
constexpr int64_t kGptVocab = 96, kGptContext = 64;

std::shared_ptr<nn::Module> bench_model(const std::string& name) {
  if (name == "mlp") return nn::make_mlp({784, 512, 256, 10});
  if (name == "cnn") return nn::make_cnn();
  if (name == "gpt") {
    nn::CharTransformerConfig c;
    c.vocab_size = kGptVocab;
    c.context = kGptContext;
    return std::make_shared<nn::CharTransformer>(c);
  }
  throw ValueError("[bench ddp] unknown model '" + name + "': mlp, cnn or gpt");
}

// The same buckets' all-reduces with nothing beside them, launched as DDP launches them (in order,
// then waited on together), on the same buffers: seconds per step, the mean of kRounds after a few
// untimed. Against DDP's comm time it says what running beside backward costs the collectives (the
// issue's "the all-reduce inside DDP reaches >= 80% of the busbw bench comm gets at the same size").
double buckets_alone_seconds(parallel::ddp::DistributedDataParallel& ddp, dist::ProcessGroup& group) {
  constexpr int kWarmupRounds = 5, kRounds = 50;
  const std::vector<Tensor> buckets = ddp.reducer().bucket_buffers();
  auto round = [&] {
    std::vector<dist::WorkPtr> works;
    for (const Tensor& bucket : buckets) works.push_back(group.allreduce(bucket, dist::ReduceOp::Avg));
    for (auto& work : works) work->wait();
  };
  for (int i = 0; i < kWarmupRounds; ++i) round();
  group.blocking_barrier();
  auto t0 = Clock::now();
  for (int i = 0; i < kRounds; ++i) round();
  return std::chrono::duration<double>(Clock::now() - t0).count() / kRounds;
}

// Of DDP's communication, the part after the last rank started each bucket's all-reduce, in ms per
// step: for the newest timed steps in the flight record (each collective's start and finish, Unix
// µs, on every rank), the last start to the last finish over the ranks. The rest of comm ms is a
// rank's collective waiting for the other ranks' backward to reach that bucket, which busbw does
// not measure. Called right after the timed loop, before anything else enqueues collectives.
double after_last_start_ms(const parallel::ddp::DistributedDataParallel& ddp, dist::ProcessGroup& group, int steps) {
  const int64_t buckets = static_cast<int64_t>(ddp.reducer().buckets().size());
  const nlohmann::json entries = group.flight_record("bench ddp")["entries"];
  std::vector<int64_t> started, finished;  // the newest allreduces, oldest first
  for (auto it = entries.rbegin(); it != entries.rend(); ++it) {
    if ((*it)["op"] != "allreduce" || (*it)["state"] != "done") break;
    started.push_back((*it)["started_us"].get<int64_t>());
    finished.push_back((*it)["finished_us"].get<int64_t>());
  }
  std::reverse(started.begin(), started.end());
  std::reverse(finished.begin(), finished.end());
  // Whole steps only, the same count on every rank (they ran the same collectives).
  const int64_t covered = std::min<int64_t>(steps, static_cast<int64_t>(started.size()) / buckets);
  Tensor count = from_vector(std::vector<int64_t>{covered}, {1});
  group.blocking_allreduce(count, dist::ReduceOp::Min);
  const int64_t n = count.data<int64_t>()[0] * buckets;
  if (n == 0) return 0;
  Tensor last_start = from_vector(std::vector<int64_t>(started.end() - n, started.end()), {n});
  Tensor last_finish = from_vector(std::vector<int64_t>(finished.end() - n, finished.end()), {n});
  group.blocking_allreduce(last_start, dist::ReduceOp::Max);
  group.blocking_allreduce(last_finish, dist::ReduceOp::Max);
  double us = 0;
  for (int64_t i = 0; i < n; ++i) us += double(last_finish.data<int64_t>()[i] - last_start.data<int64_t>()[i]);
  return us / 1e3 / double(n / buckets);
}

// One rank's timed loop; rank 0 prints the job's figures as one JSON line.
int run_worker(const DdpBenchOptions& o) {
  dist::InitOptions init;
  init.backend = o.backend;
  auto group = dist::init_process_group(init);
  manual_seed(0);
  std::shared_ptr<nn::Module> model = bench_model(o.model);
  parallel::ddp::DdpOptions options;
  options.comm_hook = o.comm_hook;
  options.bucket_cap_bytes = parallel::ddp::bucket_cap_from_mb(o.bucket_mb);  // 0: auto
  if (o.bucket_mb > 0) options.first_bucket_cap_bytes = std::min(options.bucket_cap_bytes, options.first_bucket_cap_bytes);
  // One process is the reference: the model alone, no reducer.
  const bool alone = group->size() == 1;
  std::optional<parallel::ddp::DistributedDataParallel> ddp;
  if (!alone) ddp.emplace(model, group, options);
  Generator gen(static_cast<uint64_t>(group->rank()) + 1);
  const bool gpt = o.model == "gpt";
  Tensor x = gpt ? randint(0, kGptVocab, {o.batch, kGptContext}, gen)
                 : (o.model == "mlp" ? randn({o.batch, 784}, gen) : randn({o.batch, 1, 28, 28}, gen));
  Tensor y = gpt ? randint(0, kGptVocab, {o.batch * kGptContext}, gen) : randint(0, 10, {o.batch}, gen);
  optim::SGD opt(model->parameters(), optim::SGDOptions{0.01, 0.9});
  // Where a step's time goes, summed over the timed steps: forward (with the loss), backward (with
  // DDP's wait for the last buckets), the optimizer (with zero_grad).
  double forward_s = 0, backward_s = 0, optimizer_s = 0;
  auto seconds_since = [](Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); };
  auto step = [&] {
    auto t = Clock::now();
    opt.zero_grad();
    Tensor out = alone ? model->forward(x) : (*ddp)(x);  // (B, classes), or (B, T, V) for the GPT
    if (gpt) out = reshape(out, {-1, kGptVocab});
    Tensor loss = cross_entropy(out, y);
    forward_s += seconds_since(t);
    t = Clock::now();
    loss.backward();
    backward_s += seconds_since(t);
    t = Clock::now();
    opt.step();
    optimizer_s += seconds_since(t);
  };
  for (int i = 0; i < o.warmup; ++i) step();
  group->blocking_barrier();
  forward_s = backward_s = optimizer_s = 0;
  double hidden = 0, comm = 0, exposed = 0;
  auto t0 = Clock::now();
  for (int i = 0; i < o.steps; ++i) {
    step();
    if (alone) continue;
    const auto& trace = ddp->reducer().last_iteration();
    hidden += trace.hidden_fraction();
    comm += trace.comm_seconds;
    exposed += trace.exposed_seconds;
  }
  const double after_start_ms = alone ? 0.0 : after_last_start_ms(*ddp, *group, o.steps);
  Tensor seconds = Tensor::empty({2});
  seconds.data<float>()[0] = static_cast<float>(std::chrono::duration<double>(Clock::now() - t0).count());
  seconds.data<float>()[1] =
      alone || o.comm_hook != "none" ? 0.0f : static_cast<float>(buckets_alone_seconds(*ddp, *group));
  group->blocking_allreduce(seconds, dist::ReduceOp::Max);
  if (group->rank() == 0) {
    nlohmann::json j{{"samples_per_s", double(o.batch) * group->size() * o.steps / seconds.data<float>()[0]},
                     {"hidden_fraction", hidden / o.steps},
                     {"comm_ms", 1e3 * comm / o.steps},
                     {"alone_comm_ms", 1e3 * seconds.data<float>()[1]},
                     {"after_last_start_ms", after_start_ms},
                     {"exposed_ms", 1e3 * exposed / o.steps},
                     {"forward_ms", 1e3 * forward_s / o.steps},
                     {"backward_ms", 1e3 * backward_s / o.steps},
                     {"optimizer_ms", 1e3 * optimizer_s / o.steps},
                     {"bytes_per_step", alone ? 0 : ddp->reducer().hook().bytes_communicated() / (o.warmup + o.steps)},
                     {"backend", group->backend_name()}};
    std::printf("%s\n", j.dump().c_str());
  }
  return 0;
}

nlohmann::json run_tessera(const DdpBenchOptions& o, const std::string& model) {
  char path[] = "/tmp/tessera_bench_ddp_XXXXXX";
  int fd = mkstemp(path);
  if (fd < 0) return nullptr;
  dist::launcher::LaunchOptions launch;
  launch.nproc_per_node = o.nproc;
  launch.threads_per_worker = 1;
  launch.stdout_fd = fd;
  launch.timeout = std::chrono::seconds(600);
  launch.command = {std::filesystem::read_symlink("/proc/self/exe").string(), "bench", "ddp", "--worker",
                    "--models", model, "--batch", std::to_string(o.batch), "--steps", std::to_string(o.steps),
                    "--warmup", std::to_string(o.warmup), "--backend", o.backend, "--comm-hook", o.comm_hook,
                    "--bucket-mb", std::to_string(o.bucket_mb)};
  auto result = dist::launcher::launch(launch);
  ::close(fd);
  std::string out = read_all(path);
  std::remove(path);
  if (result.exit_code != 0) {
    std::fprintf(stderr, "bench ddp: tessera workers failed: %s\n%s", result.message.c_str(), out.c_str());
    return nullptr;
  }
  return last_json_line(out);
}

// PyTorch's DDP over gloo, eager or with the DDP-wrapped model under torch.compile.
nlohmann::json run_torch(const DdpBenchOptions& o, const std::string& model, bool compiled) {
  std::ostringstream cmd;
  cmd << o.python << " " << o.script << " --model " << model << " --nproc " << o.nproc << " --batch " << o.batch
      << " --steps " << o.steps << " --warmup " << o.warmup << (compiled ? " --compile" : "") << " 2>/dev/null";
  const CommandOutput run = run_capture(cmd.str(), kTorchTimeoutSeconds);
  if (!run.ok) {
    std::fprintf(stderr, "bench ddp: the PyTorch run failed (scripts/setup.sh --bench installs it): %s\n",
                 cmd.str().c_str());
    return nullptr;
  }
  return last_json_line(run.out);
}

}  // namespace

int ddp(const DdpBenchOptions& o) {
  if (o.worker) return run_worker(o);
  if (o.hosts > 1)
    return ddp_across_hosts(o, [&](const std::string& model) {
      DdpBenchOptions one = o;
      one.nproc = 1;
      one.comm_hook = "none";
      return run_tessera(one, model);
    });
  std::printf("tessera bench ddp: %d processes x 1 thread, batch %d per process, SGD(momentum 0.9), %d steps after %d "
              "warm-up, median [min-max] of %d repeats; backend %s, comm hook %s\n",
              o.nproc, o.batch, o.steps, o.warmup, o.repeats, o.backend.c_str(), o.comm_hook.c_str());
  constexpr const char* kRow = "%-5s %-24s %-8s %-9s %-11s %-10s %-12s %-11s %-24s %-8s %-24s %-6s %-24s %s\n";
  std::printf(kRow, "model", "tessera samples/s", "hidden", "comm ms", "after start", "alone ms", "busbw/alone",
              "bytes/step", "1 process samples/s", "scaling", "pytorch DDP eager", "ratio", "pytorch DDP compiled",
              "ratio");
  std::string torch_version;
  int failures = 0;
  std::stringstream models(o.models);
  for (std::string model; std::getline(models, model, ',');) {
    std::vector<double> ours, theirs, theirs_compiled, alone, hidden, comm, comm_alone, after_start;
    double bytes = 0;
    {  // the bar ends its line before the row is printed
      TaskProgress progress("bench ddp " + model + ": repeats", o.repeats);
      for (int r = 0; r < o.repeats; ++r, progress.advance()) {
        nlohmann::json t = run_tessera(o, model);
        if (t.is_null()) {
          ++failures;
        } else {
          ours.push_back(t["samples_per_s"]);
          hidden.push_back(t["hidden_fraction"]);
          comm.push_back(t["comm_ms"]);
          if (t.value("alone_comm_ms", 0.0) > 0) comm_alone.push_back(t["alone_comm_ms"]);
          if (t.value("after_last_start_ms", 0.0) > 0) after_start.push_back(t["after_last_start_ms"]);
          bytes = t["bytes_per_step"];
        }
        if (o.nproc > 1) {  // the same global batch in one process
          DdpBenchOptions one = o;
          one.nproc = 1;
          one.batch = o.batch * o.nproc;
          nlohmann::json a = run_tessera(one, model);
          if (a.is_null()) ++failures;
          else alone.push_back(a["samples_per_s"]);
        }
        if (o.with_torch && model != "gpt") {  // bench/torch_ddp.py has the MLP and the CNN
          for (bool compiled : {false, true}) {
            if (compiled && !o.with_compile) continue;
            nlohmann::json p = run_torch(o, model, compiled);
            if (p.is_null()) continue;
            (compiled ? theirs_compiled : theirs).push_back(p["samples_per_s"]);
            torch_version = p.value("torch_version", torch_version);
          }
        }
      }
    }
    char h[32] = "-", c[32] = "-", b[32] = "-", ratio[32] = "-", ratio_compiled[32] = "-", scaling[32] = "-";
    char ca[32] = "-", bus[32] = "-", as[32] = "-";
    if (!hidden.empty()) std::snprintf(h, sizeof h, "%.0f%%", 100 * median(hidden));
    if (!comm.empty()) std::snprintf(c, sizeof c, "%.2f", median(comm));
    // busbw inside DDP (from the last rank's start) against alone: the same bytes, so the ratio of
    // the times.
    if (!after_start.empty()) std::snprintf(as, sizeof as, "%.2f", median(after_start));
    if (!comm_alone.empty()) std::snprintf(ca, sizeof ca, "%.2f", median(comm_alone));
    if (!after_start.empty() && !comm_alone.empty())
      std::snprintf(bus, sizeof bus, "%.0f%%", 100 * median(comm_alone) / median(after_start));
    std::snprintf(b, sizeof b, "%.0f", bytes);
    if (!ours.empty() && !theirs.empty()) std::snprintf(ratio, sizeof ratio, "%.2fx", median(ours) / median(theirs));
    if (!ours.empty() && !theirs_compiled.empty())
      std::snprintf(ratio_compiled, sizeof ratio_compiled, "%.2fx", median(ours) / median(theirs_compiled));
    if (!ours.empty() && !alone.empty()) std::snprintf(scaling, sizeof scaling, "%.2fx", median(ours) / median(alone));
    std::printf(kRow, model.c_str(), median_cell(ours).c_str(), h, c, as, ca, bus, b, median_cell(alone).c_str(),
                scaling, median_cell(theirs).c_str(), ratio, median_cell(theirs_compiled).c_str(), ratio_compiled);
    std::fflush(stdout);
  }
  if (o.with_torch)
    std::printf("reference: pytorch %s (%s)\n", torch_version.empty() ? "did not run" : torch_version.c_str(),
                o.python.c_str());
  return failures == 0 ? 0 : 1;
}

}  // namespace tessera::bench
