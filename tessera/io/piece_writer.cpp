#include "tessera/io/piece_writer.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "tessera/core/error.h"
#include "tessera/io/atomic_file.h"
#include "tessera/io/safetensors.h"

namespace tessera::io {

namespace fs = std::filesystem;
using tessera::detail::concat;

namespace {

std::string rank_file(int rank, int world, const char* extension) {
  return concat("rank-", rank, "-of-", world, extension);
}

// Where each tensor's bytes lie in an encoded safetensors file, and their checksums (from the
// header encode_safetensors wrote, so the data is not read a second time).
struct Placed {
  uint64_t begin = 0, end = 0;
  uint32_t crc32 = 0;
};

std::map<std::string, Placed> placement(const std::string& bytes) {
  uint64_t header_size = 0;
  std::memcpy(&header_size, bytes.data(), sizeof header_size);
  const auto header = nlohmann::json::parse(bytes.substr(8, header_size));
  const uint64_t data = 8 + header_size;
  const auto& metadata = header.at("__metadata__");
  std::map<std::string, Placed> out;
  for (const auto& [key, entry] : header.items()) {
    if (key == "__metadata__") continue;
    Placed p;
    p.begin = data + entry.at("data_offsets").at(0).get<uint64_t>();
    p.end = data + entry.at("data_offsets").at(1).get<uint64_t>();
    const std::string crc = metadata.at(std::string(safetensors_detail::kTensorChecksumPrefix) + key);
    p.crc32 = static_cast<uint32_t>(std::stoul(crc.substr(6), nullptr, 16));
    out[key] = p;
  }
  return out;
}

// The manifest's order: `order`'s names, then optimizer/step and optimizer/lr, then optimizer/<i>.*
// by i, then the rest; ties as the ranks listed them.
void sort_tensors(std::vector<LogicalTensor>& tensors, const std::vector<std::string>& order) {
  std::map<std::string, int64_t> position;
  for (size_t i = 0; i < order.size(); ++i) position.emplace(order[i], static_cast<int64_t>(i));
  const std::string optimizer = kOptimizerTensors;
  auto key = [&](const LogicalTensor& t) -> std::pair<int, int64_t> {
    if (auto it = position.find(t.name); it != position.end()) return {0, it->second};
    if (t.name.rfind(optimizer, 0) != 0) return {3, 0};
    const std::string rest = t.name.substr(optimizer.size());
    if (rest.find('.') == std::string::npos) return {1, 0};
    try {
      return {2, std::stoll(rest.substr(0, rest.find('.')))};
    } catch (const std::exception&) {
      return {3, 0};
    }
  };
  std::stable_sort(tensors.begin(), tensors.end(), [&](const LogicalTensor& a, const LogicalTensor& b) { return key(a) < key(b); });
}

}  // namespace

void write_rank_pieces(const std::string& dir, int rank, int world, const std::vector<SavePiece>& pieces) {
  TESSERA_CHECK(rank >= 0 && rank < world, "[checkpoint] rank ", rank, " of ", world);
  Manifest records;
  records.writers = 1;
  std::map<std::string, size_t> tensor_of;  // logical name -> its entry in records
  nn::StateDict tensors;
  for (const SavePiece& piece : pieces) {
    TESSERA_CHECK(piece.data.defined() && piece.data.numel() == piece.region.numel(), "[checkpoint] the piece of ",
                  piece.name, " holds ", piece.data.defined() ? piece.data.numel() : 0, " elements, its region ",
                  piece.region.numel());
    region_runs(piece.region, piece.shape);  // inside the tensor, or a ValueError
    auto [at, added] = tensor_of.emplace(piece.name, records.tensors.size());
    if (added) records.tensors.push_back({piece.name, piece.data.dtype(), piece.shape, {}});
    LogicalTensor& tensor = records.tensors[at->second];
    TESSERA_CHECK(tensor.shape == piece.shape && tensor.dtype == piece.data.dtype(), "[checkpoint] two pieces of ",
                  piece.name, " disagree: ", shape_str(tensor.shape), " ", dtype_name(tensor.dtype), " and ",
                  shape_str(piece.shape), " ", dtype_name(piece.data.dtype()));
    PieceRecord record;
    record.file = rank_file(rank, world, ".safetensors");
    record.key = tensor.pieces.empty() ? piece.name : concat(piece.name, "#", tensor.pieces.size());
    record.region = piece.region;
    tensor.pieces.push_back(record);
    Tensor data = piece.data.device().is_cpu() ? piece.data : piece.data.to(cpu_device());
    tensors.emplace_back(record.key, data.contiguous().view(piece.region.shape()));
  }
  const std::string bytes = encode_safetensors(tensors, {{"tessera.pieces.rank", std::to_string(rank)},
                                                         {"tessera.pieces.world", std::to_string(world)}});
  const std::map<std::string, Placed> placed = placement(bytes);
  for (LogicalTensor& tensor : records.tensors)
    for (PieceRecord& record : tensor.pieces) {
      const Placed& p = placed.at(record.key);
      record.begin = p.begin, record.end = p.end, record.crc32 = p.crc32;
    }
  fs::create_directories(dir);
  write_file_atomic((fs::path(dir) / rank_file(rank, world, ".safetensors")).string(), bytes);
  write_file_atomic((fs::path(dir) / rank_file(rank, world, ".json")).string(), manifest_json(records));
}

void write_manifest(const std::string& dir, int world, const std::vector<std::string>& order) {
  Manifest manifest;
  manifest.writers = world;
  std::map<std::string, size_t> tensor_of;
  std::vector<fs::path> records;
  for (int rank = 0; rank < world; ++rank) {
    const fs::path path = fs::path(dir) / rank_file(rank, world, ".json");
    if (!fs::exists(path))
      throw IoError(concat("[checkpoint] rank ", rank, " of ", world, " wrote no pieces into ", dir, " (", path.string(),
                           " is missing)"));
    const Manifest mine = parse_manifest(read_file(path.string()), path.string(), /*whole=*/false);
    for (const LogicalTensor& tensor : mine.tensors) {
      auto [at, added] = tensor_of.emplace(tensor.name, manifest.tensors.size());
      if (added) {
        manifest.tensors.push_back(tensor);
        continue;
      }
      LogicalTensor& merged = manifest.tensors[at->second];
      if (merged.shape != tensor.shape || merged.dtype != tensor.dtype)
        throw IoError(concat("[checkpoint] ranks disagree on ", tensor.name, ": ", shape_str(merged.shape), " ",
                             dtype_name(merged.dtype), ", and ", shape_str(tensor.shape), " ", dtype_name(tensor.dtype),
                             " from rank ", rank));
      merged.pieces.insert(merged.pieces.end(), tensor.pieces.begin(), tensor.pieces.end());
    }
    records.push_back(path);
  }
  sort_tensors(manifest.tensors, order);
  const std::string text = manifest_json(manifest);
  const std::string path = (fs::path(dir) / kManifestFile).string();
  parse_manifest(text, path);  // every tensor covered exactly once, or the save fails naming it
  write_file_atomic(path, text);
  for (const fs::path& record : records) fs::remove(record);
}

std::vector<SavePiece> whole_state_pieces(const nn::StateDict& model, const nn::StateDict& optimizer) {
  std::vector<SavePiece> pieces;
  for (const auto& [name, t] : model) pieces.push_back({kModelTensors + name, t.shape(), Region::whole(t.shape()), t});
  for (const auto& [key, t] : optimizer)
    pieces.push_back({kOptimizerTensors + key, t.shape(), Region::whole(t.shape()), t});
  return pieces;
}

}  // namespace tessera::io
