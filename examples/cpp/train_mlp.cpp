// Train an MLP on Fashion-MNIST in one process, with the C++ API and no config file: the loop a
// PyTorch user writes, step by step.
//
//   build/examples/cpp/train_mlp [--steps 200] [--synthetic] [--out /tmp/tessera-example]
#include "common.h"

using namespace tessera;

int main(int argc, char** argv) {
  const example::Args args = example::parse_args(argc, argv);
  manual_seed(0);
  auto train_set = example::dataset(args, "train");
  auto test_set = example::dataset(args, "test");

  auto model = nn::make_mlp({784, 256, 10});
  optim::SGD optimizer(model->parameters(), optim::SGDOptions{.lr = 0.05, .momentum = 0.9});
  data::DataLoader loader(train_set, std::make_shared<data::RandomSampler>(train_set->size(), 0),
                          data::DataLoaderOptions{.batch_size = 64});

  int64_t step = 0;
  for (int64_t epoch = 0; step < args.steps; ++epoch) {
    loader.start_epoch(epoch);
    while (auto batch = loader.next()) {
      if (step == args.steps) break;
      Tensor logits = (*model)(reshape(batch->inputs, {batch->inputs.shape()[0], -1}));
      Tensor loss = cross_entropy(logits, batch->targets);
      optimizer.zero_grad();
      loss.backward();
      optimizer.step();
      if (++step % 50 == 0 || step == 1) std::printf("step %lld loss %.4f\n", static_cast<long long>(step), loss.item<float>());
    }
  }
  std::printf("test accuracy %.2f%%\n", 100.0 * example::accuracy(*model, *test_set));

  // The weights under PyTorch's state_dict names: safetensors.torch.load_file reads them.
  std::filesystem::create_directories(args.out);
  io::save_safetensors(args.out + "/mlp.safetensors", model->state_dict(), {{"format", "pt"}});
  std::printf("saved %s/mlp.safetensors\n", args.out.c_str());
  return 0;
}
