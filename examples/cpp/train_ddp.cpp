// The same MLP with data parallelism: every process holds a replica, reads its share of each global
// batch (DistributedSampler), and DistributedDataParallel averages the gradients during backward, so
// the optimizer step is the one-process step. Start it with the launcher:
//
//   build/tessera run --nproc-per-node 2 -- build/examples/cpp/train_ddp [--steps 200] [--synthetic]
#include "common.h"

using namespace tessera;

int main(int argc, char** argv) {
  const example::Args args = example::parse_args(argc, argv);
  // RANK, WORLD_SIZE, MASTER_ADDR/PORT and the job token come from `tessera run`.
  dist::ProcessGroupPtr group = dist::init_process_group();
  const int rank = group->rank(), world = group->size();
  manual_seed(0);  // the same initial model everywhere (DDP also broadcasts rank 0's)
  auto train_set = example::dataset(args, "train");

  auto model = nn::make_mlp({784, 256, 10});
  parallel::ddp::DistributedDataParallel ddp(model, group);
  optim::SGD optimizer(model->parameters(), optim::SGDOptions{.lr = 0.05, .momentum = 0.9});
  // Each rank reads 64 / world of every global batch of 64.
  auto sampler = std::make_shared<data::DistributedSampler>(train_set->size(), rank, world, true, 0, true);
  data::DataLoader loader(train_set, sampler, data::DataLoaderOptions{.batch_size = 64 / world});

  int64_t step = 0;
  for (int64_t epoch = 0; step < args.steps; ++epoch) {
    loader.start_epoch(epoch);
    while (auto batch = loader.next()) {
      if (step == args.steps) break;
      Tensor loss = cross_entropy(ddp(reshape(batch->inputs, {batch->inputs.shape()[0], -1})), batch->targets);
      optimizer.zero_grad();
      loss.backward();  // gradients all-reduced in buckets while backward runs
      optimizer.step();
      if ((++step % 50 == 0 || step == 1) && rank == 0)
        std::printf("step %lld loss %.4f\n", static_cast<long long>(step), loss.item<float>());
    }
  }
  if (rank == 0) std::printf("test accuracy %.2f%%\n", 100.0 * example::accuracy(*model, *example::dataset(args, "test")));
  // The replicas stayed equal: every rank prints the same checksum.
  std::printf("rank %d parameter checksum %.6f\n", rank, example::checksum(*model));
  return 0;
}
