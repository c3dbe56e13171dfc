// Checkpoint directories: <run>/checkpoints/step-<N>/{model.safetensors, trainer.safetensors}.
// model.safetensors holds the weights alone (PyTorch and Hugging Face tools load it directly);
// trainer.safetensors holds optimizer state and, in its metadata, step, epoch, data position and RNG
// state. A checkpoint is written into a temporary directory and renamed into place, and
// <run>/checkpoints/latest is replaced atomically afterwards, so a crash leaves either the old or the
// new checkpoint, never a torn one. Every file carries a checksum of its data.
//
// Each step directory also holds `run`, the id of the run that wrote it (a training run keeps one id
// from its fresh start through every resume). Retention deletes only the saving run's own older
// checkpoints, so a directory shared with another run (or a checkpoint a user copied in) never loses
// what this run did not write.
#pragma once
#include <string>
#include <vector>

#include "tessera/io/safetensors.h"

namespace tessera::io {

// How far a save proves itself before it counts (train.checkpoint_verify): not at all; every file read
// back from storage with every tensor's checksum (and a sharded step's manifest) checked; or that and
// the state reloaded at another layout: every logical tensor assembled whole from its pieces, one at a
// time, as a one-process load assembles them.
enum class Verify { kNone, kChecksums, kReload };
// "none", "checksums", "reload" -> Verify; ValueError naming anything else.
Verify parse_verify(const std::string& text);

struct CheckpointFiles {
  SafetensorsFile model;
  SafetensorsFile trainer;
  std::string path;    // the step directory it was read from
  std::string pieces;  // <path>/pieces when the step is sharded (checkpoint_manifest.h; its model file
                       // holds no tensors then: train/whole_checkpoint.h consolidates them), else ""
};

// Writes step `step` of run `run_id` under `checkpoints_dir`, points `latest` at it and keeps that
// run's newest `keep`. A step directory of the same name written by another run is an IoError, never
// replaced. `pieces`, when given, is a directory (a sharded state with its manifest,
// checkpoint_manifest.h) moved into the step as `pieces/` before the step is renamed into place.
// Unless `verify` is kNone (train.checkpoint_verify) the written step is read back (verify_checkpoint)
// before it is renamed into place: a save that does not read back whole never becomes a step directory
// or `latest`. Returns the step directory.
std::string save_checkpoint(const std::string& checkpoints_dir, int64_t step, const SafetensorsFile& model,
                            const SafetensorsFile& trainer, int64_t keep, const std::string& run_id,
                            const std::string& pieces = "", Verify verify = Verify::kChecksums);
// Reads every safetensors file of a step directory (its pieces included) back from storage, the page
// cache dropped first where the file system allows, and checks every tensor's checksum, and a sharded
// step's manifest against its pieces: IoError naming the file and the tensor that does not match, the
// file that cannot be read, or the tensor the pieces do not cover.
// With kReload, a sharded step's tensors are also assembled whole from their pieces (IoError naming the
// tensor that cannot be).
void verify_checkpoint(const std::string& step_dir, Verify depth = Verify::kChecksums);
// What `--resume auto` resumes from: the step `latest` names if it verifies, else the newest older
// step directory that does (each one skipped is added to `skipped` with its error); "" when there is
// no checkpoint at all; IoError when there are some and none verifies.
std::string newest_verified_checkpoint(const std::string& checkpoints_dir, std::vector<std::string>* skipped = nullptr);
// The directory step `step` has under `checkpoints_dir` (step-<N>, N zero-padded to 8 digits).
std::string step_directory(const std::string& checkpoints_dir, int64_t step);
// The id of the run that wrote a step directory ("" for one written before runs had ids).
std::string checkpoint_run_id(const std::string& step_dir);
// A new run id: 16 hex digits from the system's entropy source.
std::string new_run_id();
// `path` may be a step directory, a run's checkpoints directory or run directory (follows `latest`),
// or a model.safetensors file. IoError naming the path when nothing loadable is there.
CheckpointFiles load_checkpoint(const std::string& path);
// The step directory `latest` points to under a run's checkpoints directory, or "" when there is none.
std::string latest_checkpoint(const std::string& checkpoints_dir);
// The step of that checkpoint (from its step-<N> name, without reading it), or -1 when there is none.
int64_t latest_checkpoint_step(const std::string& checkpoints_dir);

}  // namespace tessera::io
