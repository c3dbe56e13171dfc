// The reference the multi-process tests compare with: one `tessera train` process on this machine.
#pragma once
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "tessera/io/checkpoint.h"
#include "tessera/train/whole_checkpoint.h"
#include "testing/temp_dir.h"

namespace tessera::testing {

// Trains <dir>/config.toml with `train_args` into <dir>/<name> (its output in <dir>/<name>.log) and
// returns the final model.
inline nn::StateDict train_alone(const std::string& dir, const std::string& name, const std::string& train_args) {
  const std::string cmd = std::string(TESSERA_BINARY) + " train " + dir + "/config.toml " + train_args +
                          " --set train.output_dir=" + dir + "/" + name + " > " + dir + "/" + name + ".log 2>&1";
  EXPECT_EQ(std::system(cmd.c_str()), 0) << read_text(dir + "/" + name + ".log");
  return io::load_checkpoint(dir + "/" + name + "/checkpoints").model.tensors;
}

// `tessera train <config> --nproc <nproc> <extra>` into `out` (its output in <out>.log); returns the
// final checkpoint's model as one process's, whatever the strategy wrote (ZeRO's shards included).
inline nn::StateDict train_with_processes(const std::string& config, const std::string& out, int nproc,
                                          const std::string& extra = "") {
  const std::string cmd = std::string(TESSERA_BINARY) + " train " + config + " --nproc " + std::to_string(nproc) +
                          " --set train.output_dir=" + out + " " + extra + " > " + out + ".log 2>&1";
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd << "\n" << read_text(out + ".log");
  return train::load_whole_checkpoint(out + "/checkpoints").model.tensors;
}

// `tessera train <config> --nproc <nproc> <extra>` into <out>: it must fail, and its output (in
// <out>.log) name the problem with `fragment`.
inline void expect_training_refused(const std::string& config, const std::string& out, int nproc,
                                    const std::string& extra, const std::string& fragment) {
  const std::string cmd = std::string(TESSERA_BINARY) + " train " + config + " --nproc " + std::to_string(nproc) +
                          " " + extra + " --set train.output_dir=" + out + " > " + out + ".log 2>&1";
  EXPECT_NE(std::system(cmd.c_str()), 0) << extra;
  EXPECT_NE(read_text(out + ".log").find(fragment), std::string::npos) << extra << "\n" << read_text(out + ".log");
}

}  // namespace tessera::testing
