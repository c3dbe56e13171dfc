// tessera checkpoint inspect|verify|convert PATH: what a checkpoint holds, whether it reads back
// whole, and its model as one safetensors file. PATH is a step directory, a run's checkpoints
// directory or run directory (following `latest`), as --resume takes.
#include <cstdio>
#include <string>

#include "cli/commands.h"
#include "tessera/io/checkpoint.h"
#include "tessera/io/checkpoint_keys.h"
#include "tessera/io/piece_reader.h"
#include "tessera/io/safetensors_layout.h"
#include "tessera/train/whole_checkpoint.h"

namespace tessera::cli {
namespace {

std::string metadata_value(const io::Metadata& m, const char* key) {
  auto it = m.find(key);
  return it == m.end() ? "-" : it->second;
}

int64_t bytes_of(const nn::StateDict& state) {
  int64_t bytes = 0;
  for (const auto& [name, t] : state) bytes += t.numel() * static_cast<int64_t>(dtype_size(t.dtype()));
  return bytes;
}

void print_tensors(const char* title, const io::SafetensorsFile& file) {
  std::printf("%s: %zu tensors, %.1f MiB\n", title, file.tensors.size(), static_cast<double>(bytes_of(file.tensors)) / (1 << 20));
  for (const auto& [name, t] : file.tensors) {
    auto crc = file.metadata.find(std::string(io::safetensors_detail::kTensorChecksumPrefix) + name);
    std::printf("  %-48s %-9s %-20s %s\n", name.c_str(), dtype_name(t.dtype()), shape_str(t.shape()).c_str(),
                crc == file.metadata.end() ? "(no checksum)" : crc->second.c_str());
  }
}

std::string region_text(const io::Region& r) {
  if (r.flat) return tessera::detail::concat("[", r.offsets[0], ":", r.offsets[0] + r.lengths[0], ")");
  std::string s;
  for (size_t d = 0; d < r.offsets.size(); ++d) s += tessera::detail::concat(d ? "," : "", r.offsets[d], ":", r.offsets[d] + r.lengths[d]);
  return "[" + s + "]";
}

// A sharded step: each logical tensor, then its pieces (file, region, checksum).
void print_manifest(const io::Manifest& manifest) {
  std::printf("manifest: %zu tensors written by %d rank(s)\n", manifest.tensors.size(), manifest.writers);
  for (const io::LogicalTensor& t : manifest.tensors) {
    std::printf("  %-48s %-9s %-20s %zu piece(s)\n", t.name.c_str(), dtype_name(t.dtype), shape_str(t.shape).c_str(),
                t.pieces.size());
    for (const io::PieceRecord& p : t.pieces)
      std::printf("    %-30s %-24s %s\n", p.file.c_str(), region_text(p.region).c_str(),
                  io::safetensors_detail::checksum_string(p.crc32).c_str());
  }
}

}  // namespace

Command add_checkpoint_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("checkpoint", "Inspect, verify or convert a checkpoint");
  cmd->require_subcommand(1);
  auto path = std::make_shared<std::string>();
  auto output = std::make_shared<std::string>();
  auto* inspect = cmd->add_subcommand("inspect", "The step, run, position and every tensor's dtype, shape and checksum (a sharded step: its manifest, every piece)");
  inspect->add_option("path", *path, "A step directory, or a run's (checkpoints) directory: its latest")->required();
  auto* verify = cmd->add_subcommand("verify", "Read every file back and check every tensor's checksum (exit 1 if not whole)");
  verify->add_option("path", *path, "A step directory, or a run's (checkpoints) directory: its latest")->required();
  auto reload = std::make_shared<bool>(false);
  verify->add_flag("--reload", *reload, "Also assemble every tensor of a sharded step whole from its pieces (a reload at another layout)");
  auto* convert = cmd->add_subcommand("convert", "Write the model, consolidated from a sharded checkpoint's pieces "
                                                 "where it has them, as one safetensors file PyTorch loads by name");
  convert->add_option("path", *path, "A step directory, or a run's (checkpoints) directory: its latest")->required();
  convert->add_option("-o,--output", *output, "The safetensors file to write")->required();
  return {cmd, [=]() -> int {
    if (inspect->parsed()) {
      const io::CheckpointFiles files = io::load_checkpoint(*path);
      const io::Metadata& m = files.trainer.metadata;
      std::printf("%s\n", files.path.c_str());
      std::printf("step %s, epoch %s, run %s, written by the %s strategy over %s process(es)%s\n",
                  metadata_value(m, io::checkpoint_keys::kStep).c_str(), metadata_value(m, io::checkpoint_keys::kEpoch).c_str(),
                  metadata_value(m, io::checkpoint_keys::kRunId).c_str(), metadata_value(m, io::checkpoint_keys::kStrategy).c_str(),
                  metadata_value(m, io::checkpoint_keys::kWorldSize).c_str(),
                  files.pieces.empty() ? "" : ("; sharded, pieces in " + files.pieces).c_str());
      if (!files.pieces.empty()) {
        print_manifest(io::PieceReader(files.pieces).manifest());
        return 0;
      }
      print_tensors("model.safetensors", files.model);
      print_tensors("trainer.safetensors (optimizer state)", files.trainer);
      return 0;
    }
    if (verify->parsed()) {
      const std::string step = io::load_checkpoint(*path).path;
      try {
        io::verify_checkpoint(step, *reload ? io::Verify::kReload : io::Verify::kChecksums);
      } catch (const IoError& e) {
        std::fprintf(stderr, "%s\n", e.what());
        return 1;
      }
      std::printf("%s reads back whole: every tensor's checksum matches%s\n", step.c_str(),
                  *reload ? ", and every tensor assembles whole" : "");
      return 0;
    }
    const io::CheckpointFiles whole = train::load_whole_checkpoint(*path);
    io::Metadata metadata = whole.model.metadata;
    metadata["format"] = "pt";
    io::save_safetensors(*output, whole.model.tensors, metadata);  // written atomically
    std::printf("%s: %zu tensors, %.1f MiB, from %s\n", output->c_str(), whole.model.tensors.size(),
                static_cast<double>(bytes_of(whole.model.tensors)) / (1 << 20), whole.path.c_str());
    return 0;
  }};
}

}  // namespace tessera::cli
