// The `tessera` command. Library errors are exceptions; this is the one place they become messages
// and exit codes.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>

#include "bench/bench.h"
#include "tessera/core/error.h"
#include "tessera/util/thread_pool.h"

int main(int argc, char** argv) {
  CLI::App app{"tessera: distributed deep-learning training in C++"};
  app.require_subcommand(1);
  int threads = 0;
  app.add_option("--threads", threads, "Intra-op threads (also bounds OpenBLAS); default TESSERA_NUM_THREADS or all cores")
      ->check(CLI::Range(1, 1024));

  auto* bench = app.add_subcommand("bench", "Benchmarks, measured beside the reference in the same run");
  bench->require_subcommand(1);

  tessera::bench::TrainStepOptions ts;
  ts.script = std::string(TESSERA_SOURCE_DIR) + "/bench/torch_train_step.py";
  auto* train_step = bench->add_subcommand("train-step", "Forward+backward+SGD step, MLP and CNN at batch 128, vs PyTorch");
  train_step->add_option("--threads-list", ts.threads, "Comma-separated thread counts")->capture_default_str();
  train_step->add_option("--models", ts.models, "Comma-separated models (mlp, cnn)")->capture_default_str();
  train_step->add_option("--repeats", ts.repeats, "Timed repeats per cell")->capture_default_str()->check(CLI::Range(1, 100));
  train_step->add_option("--mlp-steps", ts.mlp_steps, "Steps per MLP repeat")->capture_default_str()->check(CLI::Range(1, 100000));
  train_step->add_option("--cnn-steps", ts.cnn_steps, "Steps per CNN repeat")->capture_default_str()->check(CLI::Range(1, 100000));
  train_step->add_flag("!--no-torch", ts.with_torch, "Skip the PyTorch reference");
  train_step->add_option("--python", ts.python, "Python with torch")->capture_default_str();
  train_step->add_option("--torch-script", ts.script, "Path of torch_train_step.py")->capture_default_str();

  int mm_n = 1024, mm_repeats = 5;
  std::string mm_threads = "1,2";
  auto* mm = bench->add_subcommand("matmul", "sgemm GFLOP/s at n x n against the measured FP32 peak");
  mm->add_option("-n", mm_n, "Matrix size")->capture_default_str()->check(CLI::Range(1, 16384));
  mm->add_option("--threads-list", mm_threads, "Comma-separated thread counts")->capture_default_str();
  mm->add_option("--repeats", mm_repeats, "Timed repeats")->capture_default_str()->check(CLI::Range(1, 1000));

  CLI11_PARSE(app, argc, argv);
  try {
    if (threads > 0) tessera::set_num_threads(threads);
    else tessera::init_threads_from_env();
    if (train_step->parsed()) return tessera::bench::train_step(ts);
    if (mm->parsed()) return tessera::bench::matmul(mm_n, mm_threads, mm_repeats);
  } catch (const tessera::Error& e) {
    std::fprintf(stderr, "tessera: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tessera: unexpected error: %s\n", e.what());
    return 2;
  }
  return 0;
}
