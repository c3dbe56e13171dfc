#include "tessera/io/piece_reader.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "tessera/core/error.h"
#include "tessera/io/atomic_file.h"
#include "tessera/io/safetensors_layout.h"

namespace tessera::io {

namespace fs = std::filesystem;
using tessera::detail::concat;

namespace {

constexpr uint64_t kMaxPieceHeaderBytes = 100ull << 20;  // as safetensors' own limit

// An open file, closed on every path.
struct File {
  int fd = -1;
  explicit File(const std::string& path) : fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC)) {}
  ~File() {
    if (fd >= 0) ::close(fd);
  }
  // Reads exactly `size` bytes at `offset` into `out`; false where the file ends first.
  bool read_at(uint64_t offset, uint64_t size, std::string& out) const {
    out.resize(size);
    uint64_t done = 0;
    while (done < size) {
      const ssize_t n = ::pread(fd, out.data() + done, size - done, static_cast<off_t>(offset + done));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      done += static_cast<uint64_t>(n);
    }
    return true;
  }
};

// Copies the elements `source` (a piece's bytes, laid out as `source_runs`) and `destination`
// (laid out as `destination_runs`) share. Both run lists ascend in global order.
void copy_shared(const std::vector<RegionRun>& source_runs, const char* source, const std::vector<RegionRun>& destination_runs,
                 char* destination, size_t element) {
  size_t s = 0, d = 0;
  while (s < source_runs.size() && d < destination_runs.size()) {
    const RegionRun& a = source_runs[s];
    const RegionRun& b = destination_runs[d];
    const int64_t lo = std::max(a.global, b.global), hi = std::min(a.global + a.count, b.global + b.count);
    if (lo < hi)
      std::memcpy(destination + (b.local + lo - b.global) * element, source + (a.local + lo - a.global) * element,
                  static_cast<size_t>(hi - lo) * element);
    if (a.global + a.count <= b.global + b.count) ++s;
    else ++d;
  }
}

bool overlaps(const std::vector<RegionRun>& x, const std::vector<RegionRun>& y) {
  size_t i = 0, k = 0;
  while (i < x.size() && k < y.size()) {
    if (std::max(x[i].global, y[k].global) < std::min(x[i].global + x[i].count, y[k].global + y[k].count)) return true;
    if (x[i].global + x[i].count <= y[k].global + y[k].count) ++i;
    else ++k;
  }
  return false;
}

}  // namespace

PieceReader::PieceReader(std::string dir) : dir_(std::move(dir)) {
  const fs::path path = fs::path(dir_) / kManifestFile;
  if (!fs::exists(path))
    throw IoError(concat("[checkpoint] ", dir_, " has no ", kManifestFile,
                         ": not a sharded checkpoint, or its save stopped before every rank had written"));
  manifest_ = parse_manifest(read_file(path.string()), path.string());
  for (size_t i = 0; i < manifest_.tensors.size(); ++i) index_[manifest_.tensors[i].name] = i;
}

const LogicalTensor* PieceReader::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &manifest_.tensors[it->second];
}

const LogicalTensor& PieceReader::tensor(const std::string& name) const {
  const LogicalTensor* t = find(name);
  if (!t) throw IoError(concat("[checkpoint] ", dir_, " holds no ", name));
  return *t;
}

std::vector<std::string> PieceReader::names_with_prefix(const std::string& prefix) const {
  std::vector<std::string> out;
  for (const LogicalTensor& t : manifest_.tensors)
    if (t.name.rfind(prefix, 0) == 0) out.push_back(t.name);
  return out;
}

const std::map<std::string, PieceReader::Entry>& PieceReader::header_of(const LogicalTensor& tensor,
                                                                       const PieceRecord& piece) {
  auto cached = headers_.find(piece.file);
  if (cached != headers_.end()) return cached->second;
  const std::string path = (fs::path(dir_) / piece.file).string();
  const File file(path);
  if (file.fd < 0)
    throw IoError(concat("[checkpoint] ", tensor.name, ": its piece file ", path, " cannot be opened: ", std::strerror(errno)));
  std::string bytes;
  uint64_t header_size = 0;
  if (!file.read_at(0, 8, bytes)) throw IoError(concat("[checkpoint] ", tensor.name, ": ", path, " is truncated (no header)"));
  std::memcpy(&header_size, bytes.data(), 8);
  if (header_size > kMaxPieceHeaderBytes || !file.read_at(8, header_size, bytes))
    throw IoError(concat("[checkpoint] ", tensor.name, ": ", path, " is truncated within its header"));
  std::map<std::string, Entry> entries;
  try {
    const nlohmann::json header = nlohmann::json::parse(bytes);  // alive through the loop (items() keeps a pointer)
    for (const auto& [key, value] : header.items()) {
      if (key == "__metadata__") continue;
      Entry e;
      e.dtype = value.at("dtype").get<std::string>();
      e.begin = 8 + header_size + value.at("data_offsets").at(0).get<uint64_t>();
      e.end = 8 + header_size + value.at("data_offsets").at(1).get<uint64_t>();
      entries[key] = e;
    }
  } catch (const nlohmann::json::exception& e) {
    throw IoError(concat("[checkpoint] ", tensor.name, ": ", path, " has a malformed header: ", e.what()));
  }
  return headers_[piece.file] = std::move(entries);
}

const std::string& PieceReader::piece_bytes(const LogicalTensor& tensor, const PieceRecord& piece) {
  if (cached_file_ == piece.file && cached_key_ == piece.key) return cached_bytes_;
  const std::string path = (fs::path(dir_) / piece.file).string();
  const auto& entries = header_of(tensor, piece);
  auto it = entries.find(piece.key);
  if (it == entries.end() || it->second.begin != piece.begin || it->second.end != piece.end ||
      it->second.dtype != safetensors_detail::dtype_code(tensor.dtype))
    throw IoError(concat("[checkpoint] ", tensor.name, ": the manifest names the piece ", piece.key, " in ", path,
                         it == entries.end() ? ", which that file does not hold (no rank wrote it)"
                                             : ", but the file holds it elsewhere or as another dtype"));
  const File file(path);
  cached_file_.clear();
  if (file.fd < 0 || !file.read_at(piece.begin, piece.end - piece.begin, cached_bytes_))
    throw IoError(concat("[checkpoint] ", tensor.name, ": the piece ", piece.key, " in ", path,
                         file.fd < 0 ? " cannot be opened" : " is truncated (the file ends before its bytes do)"));
  const uint32_t crc = safetensors_detail::crc32_update(0, cached_bytes_.data(), cached_bytes_.size());
  if (crc != piece.crc32)
    throw IoError(concat("[checkpoint] ", tensor.name, ": the piece ", piece.key, " in ", path, " fails its checksum (",
                         safetensors_detail::checksum_string(crc), ", the manifest says ",
                         safetensors_detail::checksum_string(piece.crc32), "): the file is corrupt"));
  bytes_read_ += cached_bytes_.size();
  cached_file_ = piece.file, cached_key_ = piece.key;
  return cached_bytes_;
}

Tensor PieceReader::read(const std::string& name, const Region& region) {
  const LogicalTensor& t = tensor(name);
  std::vector<RegionRun> wanted;
  try {
    wanted = region_runs(region, t.shape);
  } catch (const ValueError& e) {
    throw ValueError(concat("[checkpoint] ", name, " is ", shape_str(t.shape), " in ", dir_, "; the region asked for is not inside it: ", e.what()));
  }
  Tensor out = Tensor::empty(region.shape(), t.dtype);
  char* destination = static_cast<char*>(out.raw_data());
  for (const PieceRecord& piece : t.pieces) {
    const std::vector<RegionRun> held = region_runs(piece.region, t.shape);
    if (!overlaps(held, wanted)) continue;  // never read
    copy_shared(held, piece_bytes(t, piece).data(), wanted, destination, dtype_size(t.dtype));
  }
  return out;
}

Tensor PieceReader::read_whole(const std::string& name) { return read(name, Region::whole(tensor(name).shape)); }

void PieceReader::verify_all() {
  for (const LogicalTensor& t : manifest_.tensors)
    for (const PieceRecord& piece : t.pieces) piece_bytes(t, piece);
}

WholeState read_whole_state(PieceReader& reader) {
  WholeState state;
  const std::string model = kModelTensors, optimizer = kOptimizerTensors;
  for (const std::string& name : reader.names_with_prefix(model))
    state.model.emplace_back(name.substr(model.size()), reader.read_whole(name));
  for (const std::string& name : reader.names_with_prefix(optimizer))
    state.optimizer.emplace_back(name.substr(optimizer.size()), reader.read_whole(name));
  return state;
}

}  // namespace tessera::io
