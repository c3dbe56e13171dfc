// Mixed precision across real processes (`tessera train --nproc N`):
//   - fp16 with dynamic loss scaling under DDP and ZeRO equals one process, skipped steps included:
//     a first scale that overflows makes every rank skip the same steps, counted in the metrics;
//   - a resumed fp16 run carries its loss scale on and ends where an uninterrupted run ends;
//   - bf16 gradients travel in half the bytes (DDP's reduction, ZeRO's reduce-scatter) and still
//     train to one bf16 process's parameters within the rounding of the reduction.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>

#include <nlohmann/json.hpp>

#include "tessera/io/checkpoint.h"
#include "tessera/nn/module.h"
#include "tessera/train/whole_checkpoint.h"
#include "testing/state_compare.h"
#include "testing/step_records.h"
#include "testing/temp_dir.h"
#include "testing/train_alone.h"

namespace tessera {
namespace {

std::string write_config(const std::string& dir, const std::string& precision) {
  std::string path = dir + "/" + precision + ".toml";
  std::ofstream(path) << "[model]\nname = \"mlp\"\nhidden = [32, 16]\n"
                      << "[data]\ndataset = \"synthetic\"\nsamples = 1024\ntest_samples = 120\nclasses = 4\n"
                      << "[optimizer]\nname = \"sgd\"\nmomentum = 0.9\nlr = 0.01\n"
                      << "[train]\nepochs = 1\nmax_steps = 20\nthreads = 1\nlog_every = 100\nglobal_batch_size = 24\n"
                      << "precision = \"" << precision << "\"\n";
  return path;
}

nn::StateDict train(const std::string& config, const std::string& out, int nproc, const std::string& extra = "") {
  return tessera::testing::train_with_processes(config, out, nproc, extra);
}

using tessera::testing::last_step;

// A first scale that overflows fp16 in the first backward passes (the output gradients reach about
// scale / batch ≫ 65504); halving each time, the scale reaches one that fits after a few skipped
// steps, and doubles every 8 clean steps after.
std::string overflowing_scale(double scale) {
  return " --set train.loss_scale_init=" + std::to_string(static_cast<int64_t>(scale)) +
         " --set train.loss_scale_growth_interval=8";
}

TEST(MixedPrecisionTraining, Fp16WithDdpAndZeroSkipsTheSameStepsAsOneProcess) {
  // Each of 2 ranks back-propagates the mean loss of its 12 samples, one process that of all 24:
  // a rank's gradients are twice as large before the all-reduce averages them, as in PyTorch's DDP.
  // So the ranks start at half the single process's scale: then every value rounded to fp16 in the
  // backward is the same on both sides (same overflows, same skipped steps), and the parameters
  // agree to the float32 sums' order, the DDP tests' 1e-5.
  const std::string dir = tessera::testing::fresh_dir("mixed-precision", "fp16");
  const std::string config = write_config(dir, "fp16");
  const nn::StateDict single = train(config, dir + "/single", 1, overflowing_scale(33554432));
  const nlohmann::json single_last = last_step(dir + "/single");
  ASSERT_TRUE(single_last.contains("skipped_steps_total")) << single_last.dump();
  const int64_t skipped = single_last["skipped_steps_total"].get<int64_t>();
  EXPECT_GE(skipped, 2);
  EXPECT_LT(skipped, 20);  // it did train after finding its scale
  for (const std::string strategy : {"ddp", "zero"}) {
    const std::string out = dir + "/" + strategy;
    const nn::StateDict split = train(config, out, 2, overflowing_scale(16777216) + " --set distributed.strategy=" + strategy);
    EXPECT_LT(tessera::testing::max_state_difference(single, split), 1e-5) << strategy;
    const nlohmann::json last = last_step(out);
    EXPECT_EQ(last["skipped_steps_total"], single_last["skipped_steps_total"]) << strategy;
    EXPECT_EQ(2 * last["loss_scale"].get<double>(), single_last["loss_scale"].get<double>()) << strategy;
  }
}

TEST(MixedPrecisionTraining, AResumedFp16RunKeepsItsLossScale) {
  const std::string dir = tessera::testing::fresh_dir("mixed-precision", "resume");
  const std::string config = write_config(dir, "fp16");
  const nn::StateDict straight = train(config, dir + "/straight", 2, overflowing_scale(16777216));
  train(config, dir + "/split", 2, overflowing_scale(16777216) + " --set train.max_steps=10");
  const nn::StateDict resumed = train(config, dir + "/split", 2, overflowing_scale(16777216) + " --resume");
  EXPECT_EQ(tessera::testing::max_state_difference(straight, resumed), 0.0);
  for (const auto& [name, t] : resumed) EXPECT_EQ(t.dtype(), DType::Float32) << name;  // fp32 masters
  EXPECT_EQ(last_step(dir + "/split")["loss_scale"], last_step(dir + "/straight")["loss_scale"]);
  EXPECT_EQ(last_step(dir + "/split")["skipped_steps_total"], last_step(dir + "/straight")["skipped_steps_total"]);
}

TEST(MixedPrecisionTraining, Bf16GradientsTravelInHalfTheBytes) {
  const std::string dir = tessera::testing::fresh_dir("mixed-precision", "bf16-wire");
  const std::string bf16 = write_config(dir, "bf16");
  const nn::StateDict single = train(bf16, dir + "/single", 1);
  // DDP: every gradient byte of the reduction halves. The parameters stay within what rounding the
  // averaged gradient to bf16 moves them: 20 steps of lr 0.01 with momentum 0.9 move a parameter by
  // at most about 20 · 10 · 0.01 · |g|, and bf16 rounds |g| by 2^-9 of itself; 1e-3 holds that for
  // these gradients (|g| < 1) with room.
  const nn::StateDict ddp = train(bf16, dir + "/ddp", 2);
  const nn::StateDict ddp_fp32_wire = train(bf16, dir + "/ddp-fp32", 2, "--set distributed.reduce_dtype=fp32");
  EXPECT_LT(tessera::testing::max_state_difference(single, ddp), 1e-3);
  EXPECT_LT(tessera::testing::max_state_difference(single, ddp_fp32_wire), 1e-5);
  const double ddp_bytes = last_step(dir + "/ddp")["comm_bytes_total"].get<double>();
  const double ddp_fp32_bytes = last_step(dir + "/ddp-fp32")["comm_bytes_total"].get<double>();
  EXPECT_NEAR(ddp_bytes / ddp_fp32_bytes, 0.5, 0.02) << ddp_bytes << " vs " << ddp_fp32_bytes;
  // ZeRO stage 2: the reduce-scatter halves, the all-gather of updated parameters stays float32
  // (equal element counts): 6 bytes where there were 8.
  const std::string zero = "--set distributed.strategy=zero --set distributed.zero_stage=2";
  const nn::StateDict sharded = train(bf16, dir + "/zero", 2, zero);
  train(bf16, dir + "/zero-fp32", 2, zero + " --set distributed.reduce_dtype=fp32");
  EXPECT_LT(tessera::testing::max_state_difference(single, sharded), 1e-3);
  const double zero_bytes = last_step(dir + "/zero")["comm_bytes_total"].get<double>();
  const double zero_fp32_bytes = last_step(dir + "/zero-fp32")["comm_bytes_total"].get<double>();
  EXPECT_NEAR(zero_bytes / zero_fp32_bytes, 0.75, 0.01) << zero_bytes << " vs " << zero_fp32_bytes;
}

TEST(MixedPrecisionTraining, Bf16PipelinesAndTensorParallelismSendBf16AndMatchOneProcess) {
  // The character transformer cut into 2 stages (and 2 data-parallel replicas of them), or split
  // over 2 tensor-parallel ranks: under bf16 the activations and their gradients cross between
  // stages as bf16, the replicas' gradients are all-reduced as bf16, and so are the tensor-parallel
  // layers' partial sums (and sequence parallelism's gathered and scattered tokens).
  const std::string dir = tessera::testing::fresh_dir("mixed-precision", "pipeline");
  const std::string corpus = dir + "/corpus.txt";
  {
    std::ofstream out(corpus);
    for (int i = 0; i < 60; ++i) out << (i % 3 ? "to be or not to be, that is the question\n" : "all the world's a stage\n");
  }
  const std::string config = dir + "/config.toml";
  std::ofstream(config) << "[model]\nname = \"transformer\"\nlayers = 2\nheads = 4\nembed_dim = 16\ncontext = 8\n"
                        << "dropout = 0.0\n[data]\ndataset = \"text\"\npath = \"" << corpus << "\"\n"
                        << "[optimizer]\nname = \"sgd\"\nlr = 0.1\nmomentum = 0.9\nclip_grad_norm = 1.0\n"
                        << "[train]\nepochs = 1\nmax_steps = 10\nthreads = 1\nlog_every = 100\nprecision = \"bf16\"\n"
                        << "[parallel]\nmicrobatches = 2\n";
  auto run = [&](const std::string& out, int nproc, int batch, const std::string& extra) {
    const std::string cmd = std::string(TESSERA_BINARY) + " train " + config + " --nproc " + std::to_string(nproc) +
                            " --set train.batch_size=" + std::to_string(batch) + " --set train.output_dir=" + out +
                            " " + extra + " > " + out + ".log 2>&1";
    EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
    return io::load_checkpoint(out + "/checkpoints").model.tensors;
  };
  const nn::StateDict single = run(dir + "/single", 1, 8, "");
  const nn::StateDict pp = run(dir + "/pp2", 2, 8, "--set parallel.pp=2");
  run(dir + "/pp2-fp32", 2, 8, "--set parallel.pp=2 --set distributed.reduce_dtype=fp32");
  const nn::StateDict dp_pp = run(dir + "/dp2pp2", 4, 4, "--set parallel.pp=2");
  const double pp_error = tessera::testing::worst_relative_error(pp, single);
  const double dp_pp_error = tessera::testing::worst_relative_error(dp_pp, single);
  std::printf("relative error against one bf16 process: pp2 %.3g, dp2pp2 %.3g\n", pp_error, dp_pp_error);
  // Each crossing rounds an activation or a gradient by at most 2^-9 of itself; over 10 steps this
  // moved the parameters by 1.7e-3 (pp2) and 2.8e-3 (dp2pp2) relative here; 1e-2 bounds it with room,
  // while a wrong wire (float32 bytes read as bf16) is off by far more.
  EXPECT_LT(pp_error, 1e-2);
  EXPECT_LT(dp_pp_error, 1e-2);
  const nn::StateDict tp = run(dir + "/tp2", 2, 8, "--set parallel.tp=2 --set parallel.schedule=gpipe");
  const nn::StateDict tp_fp32 =
      run(dir + "/tp2-fp32", 2, 8, "--set parallel.tp=2 --set parallel.schedule=gpipe --set distributed.reduce_dtype=fp32");
  const double tp_error = tessera::testing::worst_relative_error(tp, single);
  std::printf("tp2: %.3g against one bf16 process, %.3g with float32 on the wire\n", tp_error,
              tessera::testing::worst_relative_error(tp_fp32, single));
  // Even a float32 wire moves them (4.5e-4 here): the shards' partial sums add in another order, and
  // a last-bit change of an activation can change its bf16 rounding at the next product.
  EXPECT_LT(tp_error, 1e-2);
  EXPECT_LT(tessera::testing::worst_relative_error(tp_fp32, single), 1e-2);
  EXPECT_GT(tessera::testing::max_state_difference(tp, tp_fp32), 0.0);  // the bf16 wire did round
  // Sequence parallelism's all-gathers and reduce-scatters take the same wire: half the bytes.
  const std::string sp = "--set parallel.tp=2 --set parallel.sequence_parallel=true ";
  const nn::StateDict tp_sp = run(dir + "/tp2sp", 2, 8, sp);
  const nn::StateDict tp_sp_fp32 = run(dir + "/tp2sp-fp32", 2, 8, sp + "--set distributed.reduce_dtype=fp32");
  EXPECT_LT(tessera::testing::worst_relative_error(tp_sp, single), 1e-2);
  EXPECT_GT(tessera::testing::max_state_difference(tp_sp, tp_sp_fp32), 0.0);  // the bf16 wire did round
  EXPECT_EQ(2 * last_step(dir + "/tp2sp")["tp_comm_bytes"].get<int64_t>(),
            last_step(dir + "/tp2sp-fp32")["tp_comm_bytes"].get<int64_t>());
  const double bf16_bytes = last_step(dir + "/pp2")["pipeline_bytes_sent"].get<double>();
  const double fp32_bytes = last_step(dir + "/pp2-fp32")["pipeline_bytes_sent"].get<double>();
  EXPECT_GT(fp32_bytes, 0);
  EXPECT_EQ(bf16_bytes * 2, fp32_bytes);
}

}  // namespace
}  // namespace tessera
