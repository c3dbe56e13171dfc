// The MLP with parameter servers: servers hold the parameters (split over them) and run the
// optimizer; workers compute gradients on their share of the data, push them and pull the new
// values (synchronous mode here: every step waits for every worker). One program, two roles:
//
//   build/tessera run --servers 1 --workers 2 -- build/examples/cpp/train_ps [--steps 200] [--synthetic]
#include "common.h"

using namespace tessera;

namespace {

constexpr double kLr = 0.05;
const std::chrono::milliseconds kTimeout{120000};

int serve(const dist::launcher::PsRoleEnv& role) {
  parallel::ps::ServerOptions o;
  o.server_rank = role.server_rank;
  o.num_servers = role.num_servers;
  o.num_workers = role.num_workers;
  o.mode = parallel::ps::Mode::kSync;
  o.optimizer.name = "sgd";
  o.optimizer.momentum = 0.9;
  const char* token = env_setting("TESSERA_JOB_TOKEN");  // set by tessera run
  if (token == nullptr) throw ValueError("TESSERA_JOB_TOKEN is not set: start me with tessera run --servers S --workers W");
  o.token = token;
  o.timeout = kTimeout;
  parallel::ps::ParameterServer server(o);
  // The workers find the servers through the launcher's store.
  parallel::ps::publish_server_address(*dist::store_from_env(kTimeout, -1 - role.server_rank), role.server_rank,
                                       server.address());
  parallel::ps::ServerReport report = server.run();  // until every worker has finished
  std::printf("server %d: %lld updates\n", role.server_rank, static_cast<long long>(report.updates));
  return 0;
}

int work(const example::Args& args, const dist::launcher::PsRoleEnv& role) {
  const dist::launcher::WorkerEnv env = dist::launcher::worker_env_from_environment();
  manual_seed(0);  // worker 0's initial values reach the servers; the others pull them
  auto model = nn::make_mlp({784, 256, 10});
  parallel::ps::ClientOptions c;
  c.rank = env.rank;
  c.token = env.job_token;
  c.timeout = kTimeout;
  c.servers = parallel::ps::lookup_server_addresses(*dist::store_from_env(kTimeout), role.num_servers);
  parallel::ps::PsWorker worker(model, c);
  worker.start();

  auto train_set = example::dataset(args, "train");
  auto sampler = std::make_shared<data::DistributedSampler>(train_set->size(), env.rank, env.world_size, true, 0, true);
  data::DataLoader loader(train_set, sampler, data::DataLoaderOptions{.batch_size = 64 / env.world_size});
  int64_t step = 0;
  for (int64_t epoch = 0; step < args.steps; ++epoch) {
    loader.start_epoch(epoch);
    while (auto batch = loader.next()) {
      if (step == args.steps) break;
      for (auto& p : model->parameters()) p.set_grad(Tensor());
      Tensor loss = cross_entropy((*model)(reshape(batch->inputs, {batch->inputs.shape()[0], -1})), batch->targets);
      loss.backward();
      worker.step(kLr);  // push the gradients, pull the servers' new values
      if ((++step % 50 == 0 || step == 1) && env.rank == 0)
        std::printf("step %lld loss %.4f\n", static_cast<long long>(step), loss.item<float>());
    }
  }
  worker.finish();
  if (env.rank == 0) std::printf("test accuracy %.2f%%\n", 100.0 * example::accuracy(*model, *example::dataset(args, "test")));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const example::Args args = example::parse_args(argc, argv);
  const dist::launcher::PsRoleEnv role = dist::launcher::ps_role_from_environment();
  if (role.role == dist::launcher::PsRoleEnv::Role::kServer) return serve(role);
  if (role.role == dist::launcher::PsRoleEnv::Role::kWorker) return work(args, role);
  std::fprintf(stderr, "start me with: tessera run --servers 1 --workers 2 -- %s\n", argv[0]);
  return 2;
}
