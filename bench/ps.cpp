// `tessera bench ps`: parameter-server training throughput and traffic in each mode (synchronous,
// asynchronous, bounded staleness) against DDP's all-reduce, for the MLP (784-512-256-10, dense)
// and for an embedding-heavy bag-of-words classifier (EmbeddingBag(vocab, 32) -> Linear(32, 10),
// 32 ids per sample, vocab 1M by default), where PS moves only the rows a batch touches while
// all-reduce moves the whole table's gradient.
//
// Method: per model and mode, a fresh job under the launcher: W workers (and S servers for PS) of
// one thread each, SGD(momentum 0.9), a fixed random batch per worker, `warmup` untimed steps, then
// `steps` timed ones. samples/s is the sum over workers of batch × steps / that worker's time (in
// asynchronous modes workers run at their own pace); bytes/step is worker 0's payload per step,
// both directions (PS: values, gradients and row ids; DDP: the reducer's all-reduce bytes).
#include <chrono>
#include <cstdlib>
#include <cstdio>
#include <filesystem>
#include <sstream>
#include <unistd.h>

#include "bench/bench.h"
#include "tessera/core/rng.h"
#include "tessera/dist/init.h"
#include "tessera/dist/launcher/env.h"
#include "tessera/dist/launcher/launcher.h"
#include "tessera/dist/net/interface.h"
#include "tessera/dist/store/store_from_env.h"
#include "tessera/nn/embedding_bag.h"
#include "tessera/nn/layers.h"
#include "tessera/nn/models.h"
#include "tessera/ops/ops.h"
#include "tessera/optim/sgd.h"
#include "tessera/parallel/ddp/distributed_data_parallel.h"
#include "tessera/parallel/ps/server.h"
#include "tessera/parallel/ps/worker.h"
#include "tessera/util/settings.h"

namespace tessera::bench {

namespace {

using Clock = std::chrono::steady_clock;
constexpr int64_t kBagLength = 32, kEmbedDim = 32;
const dist::Milliseconds kPsBenchTimeout{600000};

std::shared_ptr<nn::Module> make_model(const PsBenchOptions& o) {
  if (o.model == "mlp") return nn::make_mlp({784, 512, 256, 10});
  auto m = std::make_shared<nn::Sequential>();
  m->push_back(std::make_shared<nn::EmbeddingBag>(o.vocab, kEmbedDim));
  m->push_back(std::make_shared<nn::Linear>(kEmbedDim, 10));
  return m;
}

Tensor make_inputs(const PsBenchOptions& o, Generator& gen) {
  return o.model == "mlp" ? randn({o.batch, 784}, gen) : randint(0, o.vocab, {o.batch, kBagLength}, gen);
}

parallel::ps::OptimizerSpec sgd_momentum() {
  parallel::ps::OptimizerSpec s;
  s.momentum = 0.9;
  return s;
}

int run_server(const PsBenchOptions& o, const dist::launcher::PsRoleEnv& role) {
  parallel::ps::ServerOptions s;
  s.server_rank = role.server_rank;
  s.num_servers = role.num_servers;
  s.num_workers = role.num_workers;
  s.mode = parallel::ps::parse_mode(o.mode);
  s.staleness = o.staleness;
  s.optimizer = sgd_momentum();
  if (const char* token = env_setting("TESSERA_JOB_TOKEN")) s.token = token;
  // Loopback on one machine; across test hosts, the interface that reaches the master.
  s.host = dist::detail::listen_address(dist::launcher::master_addr_from_environment().value_or("127.0.0.1"),
                                        "MASTER_ADDR");
  s.timeout = kPsBenchTimeout;
  s.log = [](const std::string&) {};
  parallel::ps::ParameterServer server(s);
  auto store = dist::store_from_env(kPsBenchTimeout, -1 - role.server_rank);
  parallel::ps::publish_server_address(*store, role.server_rank, server.address());
  server.run();
  return 0;
}

// Each worker posts its time; worker 0 adds the rates up and prints the job's line.
void report(dist::Store& store, int rank, int workers, const PsBenchOptions& o, double seconds, double bytes_per_step) {
  store.set("bench/seconds/" + std::to_string(rank), std::to_string(seconds));
  if (rank != 0) return;
  double rate = 0;
  for (int r = 0; r < workers; ++r) rate += double(o.batch) * o.steps / std::stod(store.get_string("bench/seconds/" + std::to_string(r)));
  std::printf("%s\n", nlohmann::json{{"samples_per_s", rate}, {"bytes_per_step", bytes_per_step}}.dump().c_str());
}

int run_ps_worker(const PsBenchOptions& o) {
  auto env = dist::launcher::worker_env_from_environment();
  auto store = dist::store_from_env(kPsBenchTimeout);
  parallel::ps::ClientOptions c;
  c.rank = env.rank;
  c.token = env.job_token;
  c.timeout = kPsBenchTimeout;
  c.servers = parallel::ps::lookup_server_addresses(*store, dist::launcher::ps_role_from_environment().num_servers);
  manual_seed(0);
  auto model = make_model(o);
  parallel::ps::PsWorker worker(model, c);
  worker.start();
  Generator gen(static_cast<uint64_t>(env.rank) + 1);
  Tensor x = make_inputs(o, gen), y = randint(0, 10, {o.batch}, gen);
  auto step = [&] {
    for (auto& p : model->parameters()) p.set_grad(Tensor());
    cross_entropy((*model)(x), y).backward();
    worker.step(0.01);
  };
  for (int i = 0; i < o.warmup; ++i) step();
  auto t0 = Clock::now();
  for (int i = 0; i < o.steps; ++i) step();
  double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  worker.finish();
  report(*store, env.rank, env.world_size, o, seconds, double(worker.counters().total_bytes()) / (o.warmup + o.steps));
  return 0;
}

int run_ddp_worker(const PsBenchOptions& o) {
  auto group = dist::init_process_group();
  manual_seed(0);
  auto model = make_model(o);
  parallel::ddp::DistributedDataParallel ddp(model, group, {});
  Generator gen(static_cast<uint64_t>(group->rank()) + 1);
  Tensor x = make_inputs(o, gen), y = randint(0, 10, {o.batch}, gen);
  optim::SGD opt(model->parameters(), optim::SGDOptions{0.01, 0.9});
  auto step = [&] {
    opt.zero_grad();
    cross_entropy(ddp(x), y).backward();
    opt.step();
  };
  for (int i = 0; i < o.warmup; ++i) step();
  auto t0 = Clock::now();
  for (int i = 0; i < o.steps; ++i) step();
  double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  auto store = dist::store_from_env(kPsBenchTimeout);
  report(*store, group->rank(), group->size(), o, seconds,
         double(ddp.reducer().hook().bytes_communicated()) / (o.warmup + o.steps));
  return 0;
}

nlohmann::json run_job(const PsBenchOptions& o, const std::string& model, const std::string& mode) {
  char path[] = "/tmp/tessera_bench_ps_XXXXXX";
  int fd = mkstemp(path);
  if (fd < 0) return nullptr;
  dist::launcher::LaunchOptions launch;
  launch.nproc_per_node = o.workers;
  launch.servers_per_node = mode == "ddp" ? 0 : o.servers;
  launch.threads_per_worker = 1;
  launch.stdout_fd = fd;
  launch.timeout = std::chrono::seconds(900);
  launch.command = {std::filesystem::read_symlink("/proc/self/exe").string(), "bench", "ps", "--worker",
                    "--models", model, "--modes", mode, "--batch", std::to_string(o.batch), "--steps",
                    std::to_string(o.steps), "--warmup", std::to_string(o.warmup), "--vocab", std::to_string(o.vocab),
                    "--staleness", std::to_string(o.staleness)};
  auto result = dist::launcher::launch(launch);
  ::close(fd);
  std::string out = read_all(path);
  std::remove(path);
  if (result.exit_code != 0) {
    std::fprintf(stderr, "bench ps: the %s %s job failed: %s\n%s", model.c_str(), mode.c_str(), result.message.c_str(),
                 out.c_str());
    return nullptr;
  }
  return last_json_line(out);
}

}  // namespace

int ps(const PsBenchOptions& options) {
  if (options.worker) {
    PsBenchOptions o = options;
    o.model = o.models;
    o.mode = o.modes;
    auto role = dist::launcher::ps_role_from_environment();
    if (role.role == dist::launcher::PsRoleEnv::Role::kServer) return run_server(o, role);
    return o.mode == "ddp" ? run_ddp_worker(o) : run_ps_worker(o);
  }
  const auto& o = options;
  if (o.hosts > 1) return ps_across_hosts(o);
  std::printf("tessera bench ps: %d workers (+ %d servers for PS) x 1 thread, batch %d per worker, SGD(momentum 0.9), "
              "%d steps after %d warm-up, median [min-max] of %d repeats; bow: EmbeddingBag(%lld, %lld), %lld ids per "
              "sample; ssp staleness %lld\n",
              o.workers, o.servers, o.batch, o.steps, o.warmup, o.repeats, static_cast<long long>(o.vocab),
              static_cast<long long>(kEmbedDim), static_cast<long long>(kBagLength), static_cast<long long>(o.staleness));
  std::printf("%-5s %-6s %-26s %-14s %s\n", "model", "mode", "samples/s", "bytes/step", "vs ddp");
  int failures = 0;
  std::stringstream models(o.models);
  for (std::string model; std::getline(models, model, ',');) {
    double ddp_rate = 0;
    std::stringstream modes(o.modes);
    for (std::string mode; std::getline(modes, mode, ',');) {
      std::vector<double> rates;
      double bytes = 0;
      for (int r = 0; r < o.repeats; ++r) {
        nlohmann::json j = run_job(o, model, mode);
        if (j.is_null()) {
          ++failures;
          continue;
        }
        rates.push_back(j["samples_per_s"]);
        bytes = j["bytes_per_step"];
      }
      if (mode == "ddp") ddp_rate = median(rates);
      char ratio[32] = "-";
      if (ddp_rate > 0 && !rates.empty()) std::snprintf(ratio, sizeof ratio, "%.2fx", median(rates) / ddp_rate);
      std::printf("%-5s %-6s %-26s %-14.0f %s\n", model.c_str(), mode.c_str(), median_cell(rates).c_str(), bytes, ratio);
      std::fflush(stdout);
    }
  }
  return failures == 0 ? 0 : 1;
}

}  // namespace tessera::bench
