#include "tessera/parallel/ps/server_checkpoint.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>

#include "tessera/core/error.h"
#include "tessera/io/safetensors.h"
#include "tessera/ops/ops.h"

namespace tessera::parallel::ps {

namespace fs = std::filesystem;
using tessera::detail::concat;

std::string server_checkpoint_path(const std::string& dir, int server_rank, int64_t step) {
  return (fs::path(dir) / concat("server-", server_rank) / concat("step-", step, ".safetensors")).string();
}

std::string plan_signature(const ShardPlan& plan) {
  std::string s;
  for (const auto& spec : plan.specs()) s += concat(spec.name, ":", spec.rows, "x", spec.row_size, spec.sparse ? "s" : "", ";");
  return s;
}

namespace {

void prune(const fs::path& dir, int keep) {
  std::vector<std::pair<int64_t, fs::path>> files;
  for (const auto& e : fs::directory_iterator(dir)) {
    std::string name = e.path().filename().string();
    if (name.rfind("step-", 0) != 0 || e.path().extension() != ".safetensors") continue;
    try {
      files.emplace_back(std::stoll(name.substr(5)), e.path());
    } catch (const std::exception&) {
    }
  }
  std::sort(files.begin(), files.end());
  for (size_t i = 0; i + static_cast<size_t>(std::max(keep, 1)) < files.size(); ++i) fs::remove(files[i].second);
}

std::string metadata_of(const io::SafetensorsFile& file, const std::string& key, const std::string& path) {
  auto it = file.metadata.find(key);
  TESSERA_CHECK(it != file.metadata.end(), path, " lacks metadata '", key, "'");
  return it->second;
}

// Fills this server's pieces and returns its optimizer's state, from the files of a job of `saved`
// servers (each file: "piece.<its plan's index>" values and "optimizer.dense.<slot>.<buffer>",
// "optimizer.sparse.<slot>.<buffer>" state). The plan of `saved` servers says which rows each
// file's pieces hold; every row of this server's pieces is copied from the piece that held it.
// The optimizers are elementwise, so the state moves with its rows and training continues exactly.
nn::StateDict restore_from(const std::vector<io::SafetensorsFile>& files, int saved, const ShardPlan& current,
                           std::vector<HeldShard>& held) {
  const ShardPlan* plan = &current;
  const ShardPlan old(plan->specs(), saved);
  // Per old piece: its file, its slot among that server's dense or sparse pieces, and its tensors.
  struct OldPiece {
    const io::SafetensorsFile* file = nullptr;
    size_t slot = 0;
    std::map<std::string, Tensor> tensors;  // "values" and the optimizer's buffers by name
  };
  std::vector<OldPiece> pieces(old.pieces().size());
  for (int k = 0; k < saved; ++k) {
    size_t dense_slot = 0, sparse_slot = 0;
    for (int q : old.pieces_of(k)) {
      const bool sparse = old.specs()[old.pieces()[q].param].sparse;
      pieces[q].file = &files[k];
      pieces[q].slot = sparse ? sparse_slot++ : dense_slot++;
    }
    for (const auto& [name, t] : files[k].tensors) {
      if (name.rfind("piece.", 0) == 0) {
        const size_t q = std::stoul(name.substr(6));
        TESSERA_CHECK(q < pieces.size() && pieces[q].file == &files[k], "server ", k, "'s file holds piece ", q,
                      ", which its plan does not give it");
        pieces[q].tensors["values"] = t;
      }
    }
  }
  // The optimizer's state in each old file, by (dense or sparse, slot) -> buffer name -> tensor.
  std::vector<std::map<std::pair<bool, size_t>, std::map<std::string, Tensor>>> state(static_cast<size_t>(saved));
  nn::StateDict scalars;  // "dense.step", "dense.lr": equal on every server (they step together)
  for (int k = 0; k < saved; ++k)
    for (const auto& [name, t] : files[k].tensors) {
      if (name.rfind("optimizer.", 0) != 0) continue;
      const std::string key = name.substr(10);
      const bool sparse = key.rfind("sparse.", 0) == 0;
      const size_t at = key.find('.', sparse ? 7 : 6);
      if (at == std::string::npos || (!sparse && key.rfind("dense.", 0) != 0)) {
        if (k == 0) scalars.emplace_back(key, t);
        continue;
      }
      const std::string slot = key.substr(sparse ? 7 : 6, at - (sparse ? 7 : 6));
      if (slot.empty() || slot.find_first_not_of("0123456789") != std::string::npos) {
        if (k == 0) scalars.emplace_back(key, t);
        continue;
      }
      state[k][{sparse, std::stoul(slot)}][key.substr(at + 1)] = t;
    }
  nn::StateDict optimizer_state = scalars;
  for (auto& h : held) {
    const Piece& mine = plan->pieces()[h.piece];
    const int64_t row_size = plan->specs()[mine.param].row_size;
    std::map<std::string, Tensor> buffers;  // this piece's optimizer buffers, filled row range by range
    bool step_taken = false;
    for (size_t q = 0; q < old.pieces().size(); ++q) {
      const Piece& theirs = old.pieces()[q];
      const int64_t begin = std::max(mine.row_begin, theirs.row_begin), end = std::min(mine.row_end, theirs.row_end);
      if (theirs.param != mine.param || begin >= end) continue;
      auto values = pieces[q].tensors.find("values");
      TESSERA_CHECK(values != pieces[q].tensors.end() && values->second.numel() == theirs.rows() * row_size,
                    "the checkpoint lacks piece ", q, " (rows ", theirs.row_begin, "-", theirs.row_end, " of '",
                    plan->specs()[mine.param].name, "')");
      auto copy_rows = [&](const Tensor& from, Tensor& to) {
        Tensor c = from.contiguous();
        std::memcpy(to.data<float>() + (begin - mine.row_begin) * row_size,
                    c.data<float>() + (begin - theirs.row_begin) * row_size,
                    static_cast<size_t>((end - begin) * row_size) * sizeof(float));
      };
      copy_rows(values->second, h.values);
      const int k = theirs.server;
      auto found = state[k].find({h.sparse, pieces[q].slot});
      if (found == state[k].end()) continue;
      for (const auto& [buffer, t] : found->second) {
        if (buffer == "step") {  // a sparse piece's count of Adam steps: its first row's
          if (!step_taken) optimizer_state.emplace_back(concat("sparse.", h.slot, ".step"), t);
          step_taken = true;
          continue;
        }
        TESSERA_CHECK(t.numel() == theirs.rows() * row_size, "optimizer state '", buffer, "' of piece ", q,
                      " has ", t.numel(), " elements, expected ", theirs.rows() * row_size);
        auto [it, fresh] = buffers.try_emplace(buffer, Tensor());
        if (fresh) it->second = zeros(h.values.shape());
        copy_rows(t, it->second);
      }
    }
    for (auto& [buffer, t] : buffers)
      optimizer_state.emplace_back(concat(h.sparse ? "sparse." : "dense.", h.slot, ".", buffer), t);
  }
  return optimizer_state;
}

}  // namespace

std::string save_server_shard(const std::string& dir, const ShardCheckpoint& at, const ShardPlan& plan,
                              const std::vector<HeldShard>& held, const nn::StateDict& optimizer_state) {
  io::SafetensorsFile file;
  for (const auto& h : held) file.tensors.emplace_back(concat("piece.", h.piece), h.values);
  for (auto& [name, t] : optimizer_state) file.tensors.emplace_back("optimizer." + name, t);
  file.metadata = {{"tessera.ps.version", std::to_string(at.version)},
                   {"tessera.ps.step", std::to_string(at.step)},
                   {"tessera.ps.num_servers", std::to_string(at.num_servers)},
                   {"tessera.ps.plan", plan_signature(plan)}};
  const std::string path = server_checkpoint_path(dir, at.server_rank, at.step);
  fs::create_directories(fs::path(path).parent_path());
  io::save_safetensors(path, file.tensors, file.metadata);  // atomic: a temporary file, then rename
  prune(fs::path(path).parent_path(), at.keep);
  return path;
}

RestoredShard restore_server_shard(const std::string& dir, int64_t step, int server_rank, int num_servers,
                                   const ShardPlan& plan, std::vector<HeldShard>& held) {
  // This server's own file names the job that wrote the step; a job of another number of servers
  // wrote other files, which are then read for the pieces that overlap this server's.
  std::string path = server_checkpoint_path(dir, 0, step);
  try {
    const io::SafetensorsFile first = io::load_safetensors(path);
    const int saved_servers = std::stoi(metadata_of(first, "tessera.ps.num_servers", path));
    TESSERA_CHECK(saved_servers >= 1 && saved_servers <= 4096, path, " names ", saved_servers, " servers");
    std::vector<io::SafetensorsFile> files(static_cast<size_t>(saved_servers));
    for (int k = 0; k < saved_servers; ++k) {
      path = server_checkpoint_path(dir, k, step);
      files[static_cast<size_t>(k)] = k == 0 ? first : io::load_safetensors(path);
      TESSERA_CHECK(metadata_of(files[k], "tessera.ps.plan", path) == plan_signature(plan), path, " holds a different model");
      TESSERA_CHECK(metadata_of(files[k], "tessera.ps.num_servers", path) == std::to_string(saved_servers), path,
                    " belongs to another job than ", server_checkpoint_path(dir, 0, step));
    }
    RestoredShard out;
    out.optimizer_state = restore_from(files, saved_servers, plan, held);
    out.version = std::stoll(metadata_of(first, "tessera.ps.version", path));
    out.from = saved_servers == num_servers
                   ? server_checkpoint_path(dir, server_rank, step)
                   : concat(dir, " (saved by ", saved_servers, " servers, resharded for ", num_servers, ")");
    return out;
  } catch (const std::exception& e) {
    throw IoError(concat("could not restore step ", step, " from ", path, ": ", e.what()));
  }
}

}  // namespace tessera::parallel::ps
