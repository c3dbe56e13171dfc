// tessera bench train-step | matmul
#include "bench/bench.h"
#include "cli/commands.h"

namespace tessera::cli {

Command add_bench_command(CLI::App& app) {
  auto* bench = app.add_subcommand("bench", "Benchmarks, measured beside the reference in the same run");
  bench->require_subcommand(1);

  auto ts = std::make_shared<bench::TrainStepOptions>();
  ts->script = std::string(TESSERA_SOURCE_DIR) + "/bench/torch_train_step.py";
  auto* train_step = bench->add_subcommand("train-step", "Forward+backward+SGD step, MLP and CNN at batch 128, vs PyTorch");
  train_step->add_option("--threads-list", ts->threads, "Comma-separated thread counts")->capture_default_str();
  train_step->add_option("--models", ts->models, "Comma-separated models (mlp, cnn)")->capture_default_str();
  train_step->add_option("--repeats", ts->repeats, "Timed repeats per cell")->capture_default_str()->check(CLI::Range(1, 100));
  train_step->add_option("--mlp-steps", ts->mlp_steps, "Steps per MLP repeat")->capture_default_str()->check(CLI::Range(1, 100000));
  train_step->add_option("--cnn-steps", ts->cnn_steps, "Steps per CNN repeat")->capture_default_str()->check(CLI::Range(1, 100000));
  train_step->add_flag("!--no-torch", ts->with_torch, "Skip the PyTorch reference");
  train_step->add_option("--python", ts->python, "Python with torch")->capture_default_str();
  train_step->add_option("--torch-script", ts->script, "Path of torch_train_step.py")->capture_default_str();

  struct MatmulOptions {
    int n = 1024, repeats = 5;
    std::string threads = "1,2";
  };
  auto mm = std::make_shared<MatmulOptions>();
  auto* matmul = bench->add_subcommand("matmul", "sgemm GFLOP/s at n x n against the measured FP32 peak");
  matmul->add_option("-n", mm->n, "Matrix size")->capture_default_str()->check(CLI::Range(1, 16384));
  matmul->add_option("--threads-list", mm->threads, "Comma-separated thread counts")->capture_default_str();
  matmul->add_option("--repeats", mm->repeats, "Timed repeats")->capture_default_str()->check(CLI::Range(1, 1000));

  return {bench, [=]() -> int {
    if (train_step->parsed()) return bench::train_step(*ts);
    return bench::matmul(mm->n, mm->threads, mm->repeats);
  }};
}

}  // namespace tessera::cli
