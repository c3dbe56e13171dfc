// MIL-NCE video-text training (nn/milnce.h) on pre-extracted clip features (data/clip_text.h): a
// video and a text encoder, each under DistributedDataParallel, and a loss whose negatives come from
// every rank's batch (all_gather_with_grad), so N ranks train as one process on the global batch.
// Without data it writes a synthetic set with a planted clip-text correspondence first.
//
//   build/tessera run --nproc-per-node 2 -- build/examples/cpp/milnce [--steps 1000] [--out DIR]
#include <filesystem>

#include "common.h"

using namespace tessera;

int main(int argc, char** argv) {
  example::Args args = example::parse_args(argc, argv);
  dist::ProcessGroupPtr group = dist::init_process_group();
  const int rank = group->rank(), world = group->size();
  const std::string data_dir = args.out + "/milnce-data";
  if (rank == 0 && !std::filesystem::exists(data_dir + "/test/meta.json")) {
    data::write_synthetic_clip_text(data_dir + "/train", {.clips = 4000, .seed = 7, .stream = 0});
    data::write_synthetic_clip_text(data_dir + "/test", {.clips = 500, .seed = 7, .stream = 1});
  }
  group->barrier()->wait();  // the others read what rank 0 wrote
  auto train_set = data::load_clip_text(data_dir + "/train");
  const data::ClipTextMeta& meta = train_set->meta();

  manual_seed(0);
  const nn::MilNceConfig config{.feature_dim = meta.feature_dim, .vocab = meta.vocab};
  auto video = std::make_shared<nn::VideoEncoder>(config);
  auto text = std::make_shared<nn::TextEncoder>(config);
  parallel::ddp::DistributedDataParallel video_ddp(video, group), text_ddp(text, group);
  std::vector<Tensor> params = video->parameters();
  for (const Tensor& p : text->parameters()) params.push_back(p);
  optim::Adam optimizer(params, optim::AdamOptions{.lr = 2e-3});
  const int64_t global_batch = 128;
  auto sampler = std::make_shared<data::DistributedSampler>(train_set->size(), rank, world, true, 0, true);
  data::DataLoader loader(train_set, sampler, data::DataLoaderOptions{.batch_size = global_batch / world, .drop_last = true});

  int64_t step = 0;
  const int64_t steps = args.steps == 200 ? 1000 : args.steps;  // 1000 by default (--steps overrides)
  for (int64_t epoch = 0; step < steps; ++epoch) {
    loader.start_epoch(epoch);
    while (auto batch = loader.next()) {
      if (step == steps) break;
      Tensor loss = nn::mil_nce_loss(video_ddp(batch->inputs), text_ddp(batch->targets), 0.1f, group.get());
      optimizer.zero_grad();
      loss.backward();  // through the gathers to every rank's rows, then DDP's all-reduce
      optimizer.step();
      if ((++step % 100 == 0 || step == 1 || step == steps) && rank == 0)
        std::printf("step %lld loss %.4f\n", static_cast<long long>(step), loss.item<float>());
    }
  }
  if (rank == 0) {
    auto test_set = data::load_clip_text(data_dir + "/test");
    NoGradGuard no_grad;
    const nn::RetrievalMetrics m =
        nn::text_to_video_retrieval((*text)(test_set->aligned_narrations()), (*video)(test_set->features()));
    std::printf("text->video retrieval over %lld test clips: R@1 %.3f R@5 %.3f R@10 %.3f median rank %.1f\n",
                static_cast<long long>(m.queries), m.r1, m.r5, m.r10, m.median_rank);
    nn::StateDict state;
    for (auto& [n, t] : video->named_parameters()) state.emplace_back("video." + n, t);
    for (auto& [n, t] : text->named_parameters()) state.emplace_back("text." + n, t);
    io::save_safetensors(args.out + "/milnce-model.safetensors", state);
  }
  return 0;
}
