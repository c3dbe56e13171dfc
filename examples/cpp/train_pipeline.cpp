// The MLP cut into a 2-stage pipeline: rank 0 holds the first layers, rank 1 the rest; each batch
// is split into micro-batches that flow through the stages (1F1B schedule), activations forward and
// their gradients back over the process group. Each stage steps its own optimizer.
//
//   build/tessera run --nproc-per-node 2 -- build/examples/cpp/train_pipeline [--steps 200] [--synthetic]
#include "common.h"

using namespace tessera;

int main(int argc, char** argv) {
  const example::Args args = example::parse_args(argc, argv);
  dist::ProcessGroupPtr pipeline = dist::init_process_group();
  const int stage = pipeline->rank();
  if (pipeline->size() != 2) {
    std::fprintf(stderr, "this pipeline has 2 stages: start it with tessera run --nproc-per-node 2\n");
    return 2;
  }
  manual_seed(0);  // every rank builds the whole model alike, then keeps its stage's layers
  auto model = nn::make_mlp({784, 256, 128, 10});
  nn::LayerChain layers = model->layer_chain();  // Linear, ReLU, Linear, ReLU, Linear
  const size_t cut = 2;
  nn::LayerChain mine(stage == 0 ? layers.begin() : layers.begin() + cut, stage == 0 ? layers.begin() + cut : layers.end());
  parallel::pipeline::PipelineStage pipe(mine, pipeline, {parallel::pipeline::ScheduleKind::OneForwardOneBackward, 4},
                                         [](const Tensor& logits, const Tensor& y) { return cross_entropy(logits, y); });
  optim::SGD optimizer(pipe.parameters(), optim::SGDOptions{.lr = 0.05, .momentum = 0.9});

  // Both stages read the same batches: the first uses the inputs, the last the targets.
  auto train_set = example::dataset(args, "train");
  data::DataLoader loader(train_set, std::make_shared<data::RandomSampler>(train_set->size(), 0),
                          data::DataLoaderOptions{.batch_size = 64, .drop_last = true});
  int64_t step = 0;
  for (int64_t epoch = 0; step < args.steps; ++epoch) {
    loader.start_epoch(epoch);
    while (auto batch = loader.next()) {
      if (step == args.steps) break;
      optimizer.zero_grad();
      parallel::pipeline::StepStats stats =
          pipe.train_step(reshape(batch->inputs, {batch->inputs.shape()[0], -1}), batch->targets);
      optimizer.step();
      if ((++step % 50 == 0 || step == 1) && stage == 1)
        std::printf("step %lld loss %.4f bubble %.2f\n", static_cast<long long>(step), stats.loss, stats.bubble_fraction());
    }
  }
  return 0;
}
