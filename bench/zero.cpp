// `tessera bench zero`: what sharding the training state buys and costs. For each world size and each
// of DDP and ZeRO stages 1-3, a GPT-style model trains with Adam in N processes of one thread:
//   - per-rank memory by category, measured on rank 0 after the timed steps: parameters, gradients
//     and optimizer state (the bytes the strategy holds: ZeroMemory, or for DDP the replica, its
//     .grad tensors and the reducer's flat buckets, and Adam's moments), the allocator's peak of live
//     bytes over the run, and "activ.+" as that peak minus the state held: the activations plus what
//     is in flight at the peak (stage 3's gathered units, gradients of units being reduced);
//   - samples/s (global batch × steps over the slowest rank's time);
//   - against the closed form of Rajbhandari et al. (16Ψ for DDP's state; 16Ψ/N for stage 3).
// Then, with a per-process memory budget (the allocator's, --cap-mb), the largest number of layers at
// width d = --embed that trains two steps in each mode, found by bisection over real runs.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>
#include <unistd.h>

#include "bench/bench.h"
#include "tessera/core/cpu_allocator.h"
#include "tessera/core/rng.h"
#include "tessera/dist/init.h"
#include "tessera/dist/launcher/launcher.h"
#include "tessera/nn/char_transformer.h"
#include "tessera/ops/ops.h"
#include "tessera/optim/adam.h"
#include "tessera/parallel/ddp/distributed_data_parallel.h"
#include "tessera/parallel/zero/zero_data_parallel.h"

namespace tessera::bench {

namespace {

using Clock = std::chrono::steady_clock;
constexpr int64_t kVocab = 96;
constexpr int kOutOfMemoryExit = 3;

std::vector<std::string> split(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

int64_t bytes_of(const Tensor& t) { return t.defined() ? t.numel() * 4 : 0; }

int run_worker(const ZeroBenchOptions& o) {
  dist::InitOptions init;
  auto group = dist::init_process_group(init);
  if (o.cap_mb > 0) cpu_allocator::set_memory_budget(static_cast<size_t>(o.cap_mb) << 20);
  try {
    manual_seed(0);
    nn::CharTransformerConfig c;
    c.vocab_size = kVocab, c.context = o.context, c.embed_dim = o.embed, c.heads = o.heads, c.layers = o.layers;
    c.checkpoint_activations = o.checkpointing;
    auto model = std::make_shared<nn::CharTransformer>(c);
    const int64_t psi = model->num_parameters();
    Generator gen(static_cast<uint64_t>(group->rank()) + 1);
    Tensor x = randint(0, kVocab, {o.batch, o.context}, gen), y = randint(0, kVocab, {o.batch * o.context}, gen);
    std::unique_ptr<parallel::ddp::DistributedDataParallel> ddp;
    std::unique_ptr<parallel::zero::ZeroDataParallel> zero;
    std::unique_ptr<optim::Adam> opt;
    if (o.mode == "ddp") {
      ddp = std::make_unique<parallel::ddp::DistributedDataParallel>(model, group);
      opt = std::make_unique<optim::Adam>(model->parameters(), optim::AdamOptions{1e-4});
    } else {
      parallel::zero::ZeroOptions zo;
      zo.stage = o.mode == "zero1" ? 1 : o.mode == "zero2" ? 2 : 3;
      zero = std::make_unique<parallel::zero::ZeroDataParallel>(model, group, zo);
      opt = std::make_unique<optim::Adam>(zero->parameters(), optim::AdamOptions{1e-4});
    }
    auto step = [&] {
      if (ddp) {
        opt->zero_grad();
        cross_entropy(reshape((*ddp)(x), {-1, kVocab}), y).backward();
        opt->step();
      } else {
        cross_entropy(reshape((*zero)(x), {-1, kVocab}), y).backward();
        zero->step(*opt);
      }
    };
    cpu_allocator::reset_peak_allocated_bytes();
    for (int i = 0; i < o.warmup; ++i) step();
    group->blocking_barrier();
    const auto t0 = Clock::now();
    for (int i = 0; i < o.steps; ++i) step();
    Tensor seconds = Tensor::empty({1});
    seconds.data<float>()[0] = static_cast<float>(std::chrono::duration<double>(Clock::now() - t0).count());
    group->blocking_allreduce(seconds, dist::ReduceOp::Max);
    int64_t params = 0, grads = 0, state = 0;
    if (zero) {
      const auto m = zero->memory(opt.get());
      params = m.parameters, grads = m.gradients, state = m.optimizer_state;
    } else {
      for (const Tensor& p : model->parameters()) params += bytes_of(p), grads += bytes_of(p.grad());
      grads += 4 * psi;  // the reducer's flat buckets hold every gradient once more
      for (const auto& [key, t] : opt->state_dict())
        if (key != "step" && key != "lr") state += bytes_of(t);
    }
    if (group->rank() == 0) {
      const auto peak = static_cast<int64_t>(cpu_allocator::peak_allocated_bytes());
      nlohmann::json j{{"parameters", psi},
                       {"samples_per_s", double(o.batch) * group->size() * o.steps / seconds.data<float>()[0]},
                       {"param_bytes", params},
                       {"grad_bytes", grads},
                       {"state_bytes", state},
                       {"peak_bytes", peak},
                       {"activation_bytes", std::max<int64_t>(0, peak - params - grads - state)}};
      std::printf("%s\n", j.dump().c_str());
    }
  } catch (const OutOfMemoryError& e) {
    std::fprintf(stderr, "rank %d: %s\n", group->rank(), e.what());
    std::fflush(stderr);
    std::_Exit(kOutOfMemoryExit);  // the peers fail on the lost rank; the launcher ends the job
  }
  return 0;
}

struct Outcome {
  bool ok = false;
  nlohmann::json figures;
};

Outcome run_job(const ZeroBenchOptions& o, int nproc, const std::string& mode, int64_t layers, int steps, int warmup,
                int64_t cap_mb) {
  char path[] = "/tmp/tessera_bench_zero_XXXXXX", err_path[] = "/tmp/tessera_bench_zero_err_XXXXXX";
  int fd = mkstemp(path), err_fd = mkstemp(err_path);
  if (fd < 0 || err_fd < 0) return {};
  dist::launcher::LaunchOptions launch;
  launch.nproc_per_node = nproc;
  launch.threads_per_worker = 1;
  launch.stdout_fd = fd;
  launch.stderr_fd = err_fd;  // a probe past the budget fails by design: its errors are shown only if unexpected
  launch.timeout = std::chrono::seconds(900);
  launch.command = {std::filesystem::read_symlink("/proc/self/exe").string(), "bench", "zero", "--worker",
                    "--mode", mode, "--embed", std::to_string(o.embed), "--heads", std::to_string(o.heads),
                    "--layers", std::to_string(layers), "--context", std::to_string(o.context), "--batch",
                    std::to_string(o.batch), "--steps", std::to_string(steps), "--warmup", std::to_string(warmup),
                    "--cap-mb", std::to_string(cap_mb)};
  if (o.checkpointing) launch.command.push_back("--activation-checkpointing");
  auto result = dist::launcher::launch(launch);
  ::close(fd);
  ::close(err_fd);
  std::string out = read_all(path), err = read_all(err_path);
  std::remove(path);
  std::remove(err_path);
  if (result.exit_code != 0) {
    if (cap_mb == 0 || err.find("memory budget") == std::string::npos)
      std::fprintf(stderr, "bench zero: %s with %d processes failed: %s\n%s", mode.c_str(), nproc,
                   result.message.c_str(), err.c_str());
    return {};
  }
  return {true, last_json_line(out)};
}

double mib(const nlohmann::json& j, const char* key) { return j.value(key, 0.0) / double(1 << 20); }

}  // namespace

int zero(const ZeroBenchOptions& o) {
  if (o.worker) return run_worker(o);
  std::printf("tessera bench zero: GPT d=%lld, %lld layers, %lld heads, context %lld, batch %d per process, Adam%s; "
              "%d timed steps after %d; memory of rank 0 in MiB\n",
              static_cast<long long>(o.embed), static_cast<long long>(o.layers), static_cast<long long>(o.heads),
              static_cast<long long>(o.context), o.batch, o.checkpointing ? ", activation checkpointing" : "",
              o.steps, o.warmup);
  std::printf("%-5s %-6s %10s %10s %10s %10s %10s %12s %10s %12s\n", "ranks", "mode", "params", "grads", "state",
              "activ.+", "peak", "state/16Ψ·N", "samples/s", "vs ddp");
  int failures = 0;
  for (const std::string& n_text : split(o.nprocs)) {
    const int n = std::stoi(n_text);
    double ddp_rate = 0;
    for (const std::string& mode : split(o.modes)) {
      Outcome r = run_job(o, n, mode, o.layers, o.steps, o.warmup, 0);
      if (!r.ok) {
        std::printf("%-5d %-6s failed\n", n, mode.c_str());
        ++failures;
        continue;
      }
      const auto& j = r.figures;
      const double psi = j["parameters"], rate = j["samples_per_s"];
      if (mode == "ddp") ddp_rate = rate;
      // Training state held per rank against the closed form 16Ψ/N (fp32 Adam, stage 3's ideal).
      const double held = j.value("param_bytes", 0.0) + j.value("grad_bytes", 0.0) + j.value("state_bytes", 0.0);
      char vs[32] = "-";
      if (ddp_rate > 0) std::snprintf(vs, sizeof vs, "%.2fx", rate / ddp_rate);
      std::printf("%-5d %-6s %10.1f %10.1f %10.1f %10.1f %10.1f %12.3f %10.1f %12s\n", n, mode.c_str(),
                  mib(j, "param_bytes"), mib(j, "grad_bytes"), mib(j, "state_bytes"), mib(j, "activation_bytes"),
                  mib(j, "peak_bytes"), held / (16.0 * psi / n), rate, vs);
      std::fflush(stdout);
    }
  }
  if (o.cap_mb <= 0) return failures == 0 ? 0 : 1;
  std::printf("\nlargest GPT (d=%lld) that trains 2 steps in %lld MiB per process (the allocator's budget):\n",
              static_cast<long long>(o.embed), static_cast<long long>(o.cap_mb));
  std::printf("%-5s %-6s %8s %14s\n", "ranks", "mode", "layers", "parameters");
  for (const std::string& n_text : split(o.nprocs)) {
    const int n = std::stoi(n_text);
    for (const std::string& mode : split(o.modes)) {
      int64_t lo = 0, hi = o.max_layers + 1;  // lo trains (0: none tried yet), hi does not
      double psi_at_lo = 0;
      while (hi - lo > 1) {
        const int64_t mid = lo == 0 && hi > 8 ? std::min<int64_t>(8, hi - 1) : (lo + hi) / 2;
        Outcome r = run_job(o, n, mode, mid, 1, 1, o.cap_mb);
        if (r.ok) lo = mid, psi_at_lo = r.figures["parameters"];
        else hi = mid;
      }
      std::printf("%-5d %-6s %8lld %14.0f%s\n", n, mode.c_str(), static_cast<long long>(lo), psi_at_lo,
                  lo == o.max_layers ? "  (the search's upper end)" : "");
      std::fflush(stdout);
    }
  }
  return failures == 0 ? 0 : 1;
}

}  // namespace tessera::bench
