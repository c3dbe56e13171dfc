#include "tessera/io/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <random>
#include <system_error>

#include "tessera/core/error.h"
#include "tessera/io/atomic_file.h"
#include "tessera/io/piece_reader.h"
#include "tessera/util/settings.h"

namespace tessera::io {

namespace fs = std::filesystem;

namespace {

std::string step_name(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step-%08lld", static_cast<long long>(step));
  return buf;
}

constexpr const char* kRunFile = "run";
constexpr const char* kPiecesDir = "pieces";  // a sharded checkpoint's pieces (checkpoint_manifest.h)

// The whole step directories under `dir` (not the temporary ones of a save in progress), oldest
// first: step-<N> names, N zero-padded, sort by N.
std::vector<fs::path> step_directories(const fs::path& dir) {
  std::vector<fs::path> steps;
  std::error_code ec;
  for (auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string n = entry.path().filename().string();
    if (entry.is_directory() && n.rfind("step-", 0) == 0 && n.find(".tmp") == std::string::npos)
      steps.push_back(entry.path());
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

// Removes all but the newest `keep` step directories that run `run_id` wrote.
void remove_old(const fs::path& dir, int64_t keep, const std::string& run_id) {
  std::vector<fs::path> steps = step_directories(dir);
  std::erase_if(steps, [&](const fs::path& step) { return checkpoint_run_id(step.string()) != run_id; });
  std::error_code ec;
  for (size_t i = 0; i + keep < steps.size(); ++i) fs::remove_all(steps[i], ec);
}

}  // namespace

std::string step_directory(const std::string& checkpoints_dir, int64_t step) {
  return (fs::path(checkpoints_dir) / step_name(step)).string();
}

std::string checkpoint_run_id(const std::string& step_dir) {
  const fs::path file = fs::path(step_dir) / kRunFile;
  std::error_code ec;
  if (!fs::exists(file, ec)) return "";
  std::string id = read_file(file.string());
  while (!id.empty() && (id.back() == '\n' || id.back() == ' ')) id.pop_back();
  return id;
}

std::string new_run_id() {
  std::random_device entropy;
  const uint64_t v = (static_cast<uint64_t>(entropy()) << 32) ^ entropy();
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

std::string save_checkpoint(const std::string& checkpoints_dir, int64_t step, const SafetensorsFile& model,
                            const SafetensorsFile& trainer, int64_t keep, const std::string& run_id,
                            const std::string& pieces, Verify verify) {
  TESSERA_CHECK(!run_id.empty() && run_id.find('\n') == std::string::npos, "[save_checkpoint] needs a run id");
  fs::path dir(checkpoints_dir);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw IoError("[save_checkpoint] cannot create " + dir.string() + ": " + ec.message());
  fs::path final_dir = dir / step_name(step);
  if (fs::exists(final_dir, ec) && checkpoint_run_id(final_dir.string()) != run_id)
    throw IoError("[save_checkpoint] " + final_dir.string() + " belongs to another run (" +
                  (checkpoint_run_id(final_dir.string()).empty() ? std::string("no run id")
                                                                 : "run " + checkpoint_run_id(final_dir.string())) +
                  "); this run (" + run_id + ") does not replace it. Set train.output_dir to a directory of its own");
  fs::path tmp_dir = dir / (step_name(step) + ".tmp." + std::to_string(::getpid()));
  fs::remove_all(tmp_dir, ec);
  fs::create_directories(tmp_dir, ec);
  if (ec) throw IoError("[save_checkpoint] cannot create " + tmp_dir.string() + ": " + ec.message());
  try {
    save_safetensors((tmp_dir / "model.safetensors").string(), model.tensors, model.metadata);
    if (env_int("TESSERA_DEBUG_KILL_IN_SAVE", -1) == step) ::raise(SIGKILL);  // a save cut by kill -9 (tests)
    save_safetensors((tmp_dir / "trainer.safetensors").string(), trainer.tensors, trainer.metadata);
    write_file_atomic((tmp_dir / kRunFile).string(), run_id + "\n");
    if (!pieces.empty()) {
      fs::rename(pieces, tmp_dir / kPiecesDir, ec);
      if (ec) throw IoError("cannot move " + pieces + " into " + tmp_dir.string() + ": " + ec.message());
    }
    fsync_directory(tmp_dir.string());
    if (verify != Verify::kNone) verify_checkpoint(tmp_dir.string(), verify);
  } catch (const std::exception& e) {
    // A full disk or an I/O error: the half-written step goes, `latest` still names the last whole one.
    fs::remove_all(tmp_dir, ec);
    const std::string previous = latest_checkpoint(dir.string());
    throw IoError("[save_checkpoint] could not write step " + std::to_string(step) + " under " + dir.string() + ": " +
                  e.what() + (previous.empty() ? std::string() : "; the previous checkpoint, " + previous + ", is intact"));
  }
  fs::remove_all(final_dir, ec);  // a re-save of the same step by the same run replaces it
  fs::rename(tmp_dir, final_dir, ec);
  if (ec) throw IoError("[save_checkpoint] cannot rename " + tmp_dir.string() + " to " + final_dir.string() + ": " + ec.message());
  fsync_directory(dir.string());
  write_file_atomic((dir / "latest").string(), final_dir.filename().string() + "\n");
  remove_old(dir, std::max<int64_t>(keep, 1), run_id);
  return final_dir.string();
}

namespace {

// Asks the kernel to drop `path`'s cached pages (written and fsync'd, so clean), so that the read
// that follows comes from storage rather than from the memory the writer just filled.
void drop_cached_pages(const fs::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;  // the read below reports what is wrong with the file
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

}  // namespace

Verify parse_verify(const std::string& text) {
  if (text == "none") return Verify::kNone;
  if (text == "checksums") return Verify::kChecksums;
  if (text == "reload") return Verify::kReload;
  throw ValueError("[checkpoint] verification '" + text + "' is not none, checksums or reload");
}

void verify_checkpoint(const std::string& step_dir, Verify depth) {
  std::error_code ec;
  std::vector<fs::path> files;
  for (auto it = fs::recursive_directory_iterator(step_dir, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec))
    if (it->is_regular_file() && it->path().extension() == ".safetensors") files.push_back(it->path());
  if (ec) throw IoError("[verify_checkpoint] cannot list " + step_dir + ": " + ec.message());
  for (const char* required : {"model.safetensors", "trainer.safetensors"})
    if (!fs::exists(fs::path(step_dir) / required))
      throw IoError("[verify_checkpoint] " + (fs::path(step_dir) / required).string() + " is missing");
  std::sort(files.begin(), files.end());
  // A sharded step's piece files are read through its manifest below (each piece checked against its
  // checksum there), not a second time here.
  const fs::path pieces = fs::path(step_dir) / kPiecesDir;
  for (const fs::path& file : files) {
    drop_cached_pages(file);
    if (file.parent_path() == pieces) continue;
    try {
      load_safetensors(file.string());  // checks each tensor's checksum
    } catch (const std::exception& e) {
      throw IoError("[verify_checkpoint] " + file.string() + " does not read back: " + e.what());
    }
  }
  // A sharded step: its manifest covers every tensor, and every piece is where it says, whole. A
  // reload at another layout (one process's) reads each tensor whole from its pieces instead, which
  // reads and checks every piece too.
  if (fs::exists(pieces)) {
    try {
      PieceReader reader(pieces.string());
      if (depth == Verify::kReload)
        for (const LogicalTensor& t : reader.manifest().tensors) reader.read_whole(t.name);
      else
        reader.verify_all();
    } catch (const std::exception& e) {
      throw IoError("[verify_checkpoint] " + pieces.string() + " does not read back: " + e.what());
    }
  }
}

std::string newest_verified_checkpoint(const std::string& checkpoints_dir, std::vector<std::string>* skipped) {
  // `latest` and the steps before it, newest first.
  const std::string latest = latest_checkpoint(checkpoints_dir);
  std::vector<fs::path> candidates = step_directories(checkpoints_dir);
  std::reverse(candidates.begin(), candidates.end());
  if (!latest.empty())
    std::erase_if(candidates, [&](const fs::path& step) { return step.filename() > fs::path(latest).filename(); });
  std::vector<std::string> failures;
  for (const fs::path& step : candidates) {
    try {
      verify_checkpoint(step.string());
      return step.string();
    } catch (const IoError& e) {
      failures.push_back(e.what());
      if (skipped != nullptr) skipped->push_back(e.what());
    }
  }
  if (failures.empty()) return "";
  std::string all;
  for (const std::string& f : failures) all += "\n  " + f;
  throw IoError("[resume] no checkpoint under " + checkpoints_dir + " reads back whole:" + all);
}

std::string latest_checkpoint(const std::string& checkpoints_dir) {
  fs::path latest = fs::path(checkpoints_dir) / "latest";
  if (!fs::exists(latest)) return "";
  std::string name = read_file(latest.string());
  while (!name.empty() && (name.back() == '\n' || name.back() == ' ')) name.pop_back();
  if (name.empty() || name.find('/') != std::string::npos) throw IoError("[checkpoint] " + latest.string() + " is malformed");
  return (fs::path(checkpoints_dir) / name).string();
}

int64_t latest_checkpoint_step(const std::string& checkpoints_dir) {
  const std::string latest = latest_checkpoint(checkpoints_dir);
  if (latest.empty()) return -1;
  const std::string name = fs::path(latest).filename().string();
  try {
    if (name.rfind("step-", 0) == 0) return std::stoll(name.substr(5));
  } catch (const std::exception&) {
  }
  throw IoError("[checkpoint] " + checkpoints_dir + "/latest names '" + name + "', not a step-<N> directory");
}

CheckpointFiles load_checkpoint(const std::string& path_in) {
  fs::path path(path_in);
  if (!fs::exists(path)) throw IoError("[load_checkpoint] " + path_in + " does not exist");
  if (fs::is_regular_file(path)) path = path.parent_path();
  if (!fs::exists(path / "model.safetensors")) {
    // A run directory or its checkpoints directory: follow `latest`.
    fs::path ckpts = fs::exists(path / "checkpoints") ? path / "checkpoints" : path;
    std::string latest = latest_checkpoint(ckpts.string());
    if (latest.empty())
      throw IoError("[load_checkpoint] no checkpoint in " + path_in +
                    " (expected model.safetensors, or checkpoints/latest from `tessera train`)");
    path = latest;
  }
  CheckpointFiles files;
  files.path = path.string();
  files.model = load_safetensors((path / "model.safetensors").string());
  files.trainer = load_safetensors((path / "trainer.safetensors").string());
  if (fs::exists(path / kPiecesDir)) files.pieces = (path / kPiecesDir).string();
  return files;
}

}  // namespace tessera::io
