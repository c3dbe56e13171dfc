// `tessera bench ...`: speed measured side by side with the reference in the same run.
#pragma once
#include <string>

namespace tessera::bench {

struct TrainStepOptions {
  std::string threads = "1,2";   // thread counts to measure
  std::string models = "mlp,cnn";
  int repeats = 3;
  int mlp_steps = 30;
  int cnn_steps = 10;
  bool with_torch = true;        // also run bench/torch_train_step.py under /usr/bin/python3
  std::string python = "/usr/bin/python3";
  std::string script;            // path of torch_train_step.py (defaults to the source tree's)
};

int train_step(const TrainStepOptions& options);
// GFLOP/s of the sgemm path at n×n against the measured FMA peak of the same threads.
int matmul(int n, const std::string& threads, int repeats);
// Peak FP32 GFLOP/s of `threads` cores from a register-resident FMA loop (AVX-512 when the CPU has it).
double measure_fma_peak_gflops(int threads);

}  // namespace tessera::bench
