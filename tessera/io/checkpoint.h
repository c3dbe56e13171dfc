// Checkpoint directories: <run>/checkpoints/step-<N>/{model.safetensors, trainer.safetensors}.
// model.safetensors holds the weights alone (PyTorch and Hugging Face tools load it directly);
// trainer.safetensors holds optimizer state and, in its metadata, step, epoch, data position and RNG
// state. A checkpoint is written into a temporary directory and renamed into place, and
// <run>/checkpoints/latest is replaced atomically afterwards, so a crash leaves either the old or the
// new checkpoint, never a torn one. Every file carries a checksum of its data.
#pragma once
#include <string>

#include "tessera/io/safetensors.h"

namespace tessera::io {

struct CheckpointFiles {
  SafetensorsFile model;
  SafetensorsFile trainer;
  std::string path;  // the step directory it was read from
};

// Writes step `step` under `checkpoints_dir`, points `latest` at it and keeps the newest `keep`.
// Returns the step directory.
std::string save_checkpoint(const std::string& checkpoints_dir, int64_t step, const SafetensorsFile& model,
                            const SafetensorsFile& trainer, int64_t keep);
// `path` may be a step directory, a run's checkpoints directory or run directory (follows `latest`),
// or a model.safetensors file. IoError naming the path when nothing loadable is there.
CheckpointFiles load_checkpoint(const std::string& path);
// The step directory `latest` points to under a run's checkpoints directory, or "" when there is none.
std::string latest_checkpoint(const std::string& checkpoints_dir);
// The step of that checkpoint (from its step-<N> name, without reading it), or -1 when there is none.
int64_t latest_checkpoint_step(const std::string& checkpoints_dir);

}  // namespace tessera::io
