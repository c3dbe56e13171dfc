// tessera bench checkpoint: how long a save stalls training, in the foreground (write, fsync, read
// back: io::save_checkpoint) and with train.checkpoint_async (the host copy the step makes before
// it goes on; the background thread's write measured beside it), for a state of --mb MiB (a third
// weights, two thirds Adam's moments, as a model's checkpoint is). The reference is the foreground
// save of the same state in the same run; the figure is the ratio of the two stalls.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "bench/bench.h"
#include "tessera/io/checkpoint.h"
#include "tessera/ops/ops.h"
#include "tessera/train/background_save.h"

namespace tessera::bench {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// `megabytes` of float32 tensors of 4 MiB each (a large layer's weight), named as a model's.
nn::StateDict state_of(double megabytes, const std::string& prefix, Generator& gen) {
  nn::StateDict out;
  const int64_t per_tensor = (int64_t{4} << 20) / 4;
  const int64_t total = static_cast<int64_t>(megabytes * (1 << 20) / 4);
  for (int64_t at = 0, i = 0; at < total; at += per_tensor, ++i)
    out.emplace_back(prefix + std::to_string(i) + ".weight", randn({std::min(per_tensor, total - at)}, gen));
  return out;
}

}  // namespace

int checkpoint(const CheckpointBenchOptions& o) {
  TESSERA_CHECK(o.megabytes > 0 && o.repeats >= 1, "[bench checkpoint] --mb and --repeats must be positive");
  const std::string dir = o.dir.empty() ? (std::filesystem::temp_directory_path() / "tessera_bench_checkpoint").string() : o.dir;
  std::filesystem::remove_all(dir);
  Generator gen(0);
  io::SafetensorsFile model, trainer;
  model.tensors = state_of(o.megabytes / 3, "layer.", gen);
  trainer.tensors = state_of(o.megabytes * 2 / 3, "moment.", gen);
  std::printf("tessera bench checkpoint: %.0f MiB of state, %d repeats, under %s (verify: read back and checksums)\n",
              o.megabytes, o.repeats, dir.c_str());
  std::vector<double> foreground, blocked, background;
  train::BackgroundSaver saver;
  int64_t step = 0;
  for (int r = 0; r < o.repeats; ++r) {
    auto start = Clock::now();
    io::save_checkpoint(dir, ++step, model, trainer, 2, "bench");
    foreground.push_back(seconds_since(start));
    start = Clock::now();
    io::SafetensorsFile model_copy{nn::host_copy(model.tensors), model.metadata};
    io::SafetensorsFile trainer_copy{nn::host_copy(trainer.tensors), trainer.metadata};
    const int64_t this_step = ++step;
    saver.submit([&dir, this_step, model_copy, trainer_copy] {
      return io::save_checkpoint(dir, this_step, model_copy, trainer_copy, 2, "bench");
    });
    blocked.push_back(seconds_since(start));
    saver.wait();
    background.push_back(seconds_since(start));
  }
  const double f = median(foreground), b = median(blocked), t = median(background);
  std::printf("%-34s %10s\n", "", "median s");
  std::printf("%-34s %10.3f\n", "foreground save (the reference)", f);
  std::printf("%-34s %10.3f   %.1f%% of the foreground stall\n", "background save: training blocked", b, 100.0 * b / f);
  std::printf("%-34s %10.3f\n", "background save: the thread's save", t);
  std::filesystem::remove_all(dir);
  return 0;
}

}  // namespace tessera::bench
