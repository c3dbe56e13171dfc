#include "tessera/io/checkpoint_manifest.h"

#include <algorithm>
#include <climits>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <set>

#include "tessera/core/error.h"
#include "tessera/io/safetensors_layout.h"

namespace tessera::io {

using tessera::detail::concat;
using Json = nlohmann::ordered_json;

namespace {

constexpr const char* kManifestFormat = "tessera-pieces";
// Bounds on what a manifest may claim, so that a corrupt one is refused rather than exhausting memory:
// a tensor of 2^40 elements (4 TiB of float32) and a piece of 4M runs (a column shard of a matrix of
// 4M rows) are past any checkpoint written here.
constexpr int64_t kMaxElements = int64_t{1} << 40;
constexpr int64_t kMaxRuns = int64_t{1} << 22;
constexpr int kManifestVersion = 1;

// A region in words, whatever a manifest claims (no sums that could overflow).
std::string region_text(const Region& r) {
  if (r.offsets.size() != r.lengths.size() || (r.flat && r.offsets.size() != 1)) return "a malformed region";
  if (r.flat) return concat(r.lengths[0], " elements from ", r.offsets[0]);
  if (r.offsets.empty()) return "the scalar";
  std::string s = "a box of";
  for (size_t d = 0; d < r.offsets.size(); ++d) s += concat(d ? " ×" : "", " ", r.lengths[d], " from ", r.offsets[d]);
  return s;
}

[[noreturn]] void refuse_manifest(const std::string& source, const std::string& problem) {
  throw IoError("[checkpoint] " + source + ": " + problem);
}

// Every piece of `tensor` lies inside it and holds as many bytes as its region; with `whole`, the
// pieces also cover each element exactly once.
void check_logical_tensor(const LogicalTensor& tensor, const std::string& source, bool whole) {
  struct Held {
    int64_t begin, end;
    const PieceRecord* piece;
  };
  std::vector<Held> held;
  for (const PieceRecord& piece : tensor.pieces) {
    std::vector<RegionRun> runs;
    try {
      runs = region_runs(piece.region, tensor.shape);
    } catch (const ValueError& e) {
      refuse_manifest(source, concat(tensor.name, ": the piece ", piece.key, " in ", piece.file, " is ", region_text(piece.region),
                          ", not inside its shape ", shape_str(tensor.shape), " (", e.what(), ")"));
    }
    const uint64_t bytes = static_cast<uint64_t>(piece.region.numel()) * dtype_size(tensor.dtype);
    if (piece.end < piece.begin || piece.end - piece.begin != bytes)
      refuse_manifest(source, concat(tensor.name, ": the piece ", piece.key, " in ", piece.file, " spans bytes [", piece.begin, ", ",
                          piece.end, "), but its ", piece.region.numel(), " ", dtype_name(tensor.dtype), " elements take ",
                          bytes));
    for (const RegionRun& run : runs) held.push_back({run.global, run.global + run.count, &piece});
  }
  if (!whole) return;
  std::sort(held.begin(), held.end(), [](const Held& a, const Held& b) { return a.begin < b.begin; });
  int64_t next = 0;
  const PieceRecord* previous = nullptr;
  for (const Held& h : held) {
    if (h.begin > next)
      refuse_manifest(source, concat(tensor.name, ": elements [", next, ", ", h.begin, ") of its ", shape_numel(tensor.shape),
                          " are in no piece (a rank's pieces are missing)"));
    if (h.begin < next)
      refuse_manifest(source, concat(tensor.name, ": elements [", h.begin, ", ", std::min(next, h.end), ") are in two pieces, ",
                          previous->key, " in ", previous->file, " and ", h.piece->key, " in ", h.piece->file));
    next = h.end;
    previous = h.piece;
  }
  if (next != shape_numel(tensor.shape))
    refuse_manifest(source, concat(tensor.name, ": elements [", next, ", ", shape_numel(tensor.shape),
                        ") are in no piece (a rank's pieces are missing)"));
}

uint32_t parse_manifest_crc(const std::string& text, const std::string& source, const std::string& what) {
  unsigned value = 0;
  char tail = 0;
  if (text.size() != 14 || std::sscanf(text.c_str(), "crc32:%8x%c", &value, &tail) != 1)
    refuse_manifest(source, what + ": checksum '" + text + "' is not crc32:<8 hex digits>");
  return value;
}

// A JSON integer within int64 (nlohmann would convert a float or a larger number with undefined
// behaviour); the manifest's numbers are all of this kind.
int64_t integer_of(const Json& j, const std::string& source, const std::string& what) {
  if (j.is_number_integer() && !(j.is_number_unsigned() && j.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)))
    return j.get<int64_t>();
  refuse_manifest(source, what + " is " + j.dump() + ", not an integer");
}

std::vector<int64_t> integers_of(const Json& j, const std::string& source, const std::string& what) {
  if (!j.is_array()) refuse_manifest(source, what + " is " + j.dump() + ", not a list of integers");
  std::vector<int64_t> out;
  for (const Json& v : j) out.push_back(integer_of(v, source, what));
  return out;
}

}  // namespace

Region Region::whole(const Shape& shape) {
  return box(std::vector<int64_t>(shape.size(), 0), std::vector<int64_t>(shape.begin(), shape.end()));
}

Region Region::box(std::vector<int64_t> offsets, std::vector<int64_t> lengths) {
  Region r;
  r.offsets = std::move(offsets), r.lengths = std::move(lengths);
  return r;
}

Region Region::flat_range(int64_t begin, int64_t end) {
  Region r;
  r.flat = true;
  r.offsets = {begin}, r.lengths = {end - begin};
  return r;
}

int64_t Region::numel() const {
  int64_t n = 1;
  for (int64_t l : lengths) n *= l;
  return n;
}

Shape Region::shape() const {
  if (flat) return {lengths.at(0)};
  return Shape(lengths.begin(), lengths.end());
}

std::vector<RegionRun> region_runs(const Region& region, const Shape& shape) {
  const int64_t numel = shape_numel(shape);
  if (region.flat) {
    TESSERA_CHECK(region.offsets.size() == 1 && region.lengths.size() == 1, "[region] a flat region has one range");
    const int64_t begin = region.offsets[0], count = region.lengths[0];
    TESSERA_CHECK(begin >= 0 && count >= 0 && begin <= numel && count <= numel - begin, "[region] ", count,
                  " elements from ", begin, " are outside ", numel);
    if (count == 0) return {};
    return {{begin, 0, count}};
  }
  const size_t n = shape.size();
  TESSERA_CHECK(region.offsets.size() == n && region.lengths.size() == n, "[region] a box of ", region.offsets.size(),
                " dimensions in a tensor of ", n);
  for (size_t d = 0; d < n; ++d)
    TESSERA_CHECK(region.offsets[d] >= 0 && region.lengths[d] >= 0 && region.offsets[d] <= shape[d] &&
                      region.lengths[d] <= shape[d] - region.offsets[d],
                  "[region] dimension ", d, ": ", region.lengths[d], " from ", region.offsets[d], " is outside ", shape[d]);
  if (region.numel() == 0) return {};
  if (n == 0) return {{0, 0, 1}};
  // Dimensions after k are covered whole, so each run is lengths[k] rows of them.
  size_t k = n - 1;
  while (k > 0 && region.offsets[k] == 0 && region.lengths[k] == shape[k]) --k;
  std::vector<int64_t> stride(n, 1);
  for (size_t d = n - 1; d > 0; --d) stride[d - 1] = stride[d] * shape[d];
  const int64_t run = region.lengths[k] * stride[k];
  TESSERA_CHECK(region.numel() / run <= kMaxRuns, "[region] a box cut into ", region.numel() / run,
                " runs (more than ", kMaxRuns, ")");
  std::vector<RegionRun> runs;
  std::vector<int64_t> index(k, 0);  // over the box's dimensions before k
  for (int64_t local = 0;; local += run) {
    int64_t global = region.offsets[k] * stride[k];
    for (size_t d = 0; d < k; ++d) global += (region.offsets[d] + index[d]) * stride[d];
    runs.push_back({global, local, run});
    size_t d = k;
    while (d > 0 && ++index[d - 1] == region.lengths[d - 1]) index[--d] = 0;
    if (d == 0) break;
  }
  return runs;
}

std::string manifest_json(const Manifest& manifest) {
  Json j{{"format", kManifestFormat}, {"version", kManifestVersion}, {"writers", manifest.writers}, {"tensors", Json::array()}};
  for (const LogicalTensor& t : manifest.tensors) {
    Json pieces = Json::array();
    for (const PieceRecord& p : t.pieces)
      pieces.push_back({{"file", p.file}, {"key", p.key}, {"offsets", p.region.offsets}, {"lengths", p.region.lengths},
                        {"flat", p.region.flat}, {"begin", p.begin}, {"end", p.end},
                        {"crc32", safetensors_detail::checksum_string(p.crc32)}});
    j["tensors"].push_back({{"name", t.name}, {"dtype", safetensors_detail::dtype_code(t.dtype)}, {"shape", t.shape},
                            {"pieces", std::move(pieces)}});
  }
  return j.dump(1);
}

Manifest parse_manifest(std::string_view text, const std::string& source, bool whole) {
  Manifest manifest;
  try {
    const Json j = Json::parse(text);
    if (j.at("format") != kManifestFormat || j.at("version") != kManifestVersion)
      refuse_manifest(source, concat("not a version-", kManifestVersion, " ", kManifestFormat, " manifest"));
    const int64_t writers = integer_of(j.at("writers"), source, "writers");
    if (writers < 0 || writers > (1 << 24)) refuse_manifest(source, concat("writers is ", writers));
    manifest.writers = static_cast<int>(writers);
    for (const Json& t : j.at("tensors")) {
      LogicalTensor tensor;
      tensor.name = t.at("name").get<std::string>();
      if (!safetensors_detail::dtype_from_code(t.at("dtype").get<std::string>(), tensor.dtype))
        refuse_manifest(source, tensor.name + ": unknown dtype " + t.at("dtype").dump());
      tensor.shape = integers_of(t.at("shape"), source, tensor.name + "'s shape");
      int64_t elements = 1;
      for (int64_t d : tensor.shape) {
        if (d < 0 || (d > 0 && elements > kMaxElements / d))
          refuse_manifest(source, tensor.name + ": shape " + t.at("shape").dump() + " is negative or past 2^40 elements");
        elements *= d;
      }
      for (const Json& p : t.at("pieces")) {
        PieceRecord piece;
        piece.file = p.at("file").get<std::string>();
        piece.key = p.at("key").get<std::string>();
        if (piece.file.empty() || piece.file.find('/') != std::string::npos || piece.file[0] == '.')
          refuse_manifest(source, tensor.name + ": piece file '" + piece.file + "' is not a file of the checkpoint's directory");
        piece.region.flat = p.at("flat").get<bool>();
        piece.region.offsets = integers_of(p.at("offsets"), source, tensor.name + "'s offsets");
        piece.region.lengths = integers_of(p.at("lengths"), source, tensor.name + "'s lengths");
        if (piece.region.offsets.size() != piece.region.lengths.size() || (piece.region.flat && piece.region.offsets.size() != 1))
          refuse_manifest(source, tensor.name + ": a piece's offsets and lengths do not describe a region");
        const int64_t begin = integer_of(p.at("begin"), source, tensor.name + "'s begin");
        const int64_t end = integer_of(p.at("end"), source, tensor.name + "'s end");
        if (begin < 0 || end < 0) refuse_manifest(source, tensor.name + ": a piece's byte range is negative");
        piece.begin = static_cast<uint64_t>(begin), piece.end = static_cast<uint64_t>(end);
        piece.crc32 = parse_manifest_crc(p.at("crc32").get<std::string>(), source, tensor.name);
        tensor.pieces.push_back(std::move(piece));
      }
      manifest.tensors.push_back(std::move(tensor));
    }
  } catch (const nlohmann::json::exception& e) {
    refuse_manifest(source, std::string("malformed manifest: ") + e.what());
  }
  std::set<std::string> names;
  for (const LogicalTensor& tensor : manifest.tensors)
    if (!names.insert(tensor.name).second) refuse_manifest(source, tensor.name + " is listed twice");
  for (const LogicalTensor& tensor : manifest.tensors) check_logical_tensor(tensor, source, whole);
  return manifest;
}

}  // namespace tessera::io
