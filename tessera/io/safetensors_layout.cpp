#include "tessera/io/safetensors_layout.h"

#include <zlib.h>

#include <algorithm>
#include <bit>
#include <cctype>
#include <cstdio>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "tessera/core/error.h"

namespace tessera::io {

static_assert(std::endian::native == std::endian::little, "safetensors I/O assumes a little-endian host");

namespace safetensors_detail {

const char* dtype_code(DType t) {
  switch (t) {
    case DType::Float32: return "F32";
    case DType::Int64: return "I64";
    case DType::BFloat16: return "BF16";
    case DType::Float16: return "F16";
  }
  return "?";
}

bool dtype_from_code(const std::string& code, DType& out) {
  if (code == "F32") out = DType::Float32;
  else if (code == "I64") out = DType::Int64;
  else if (code == "BF16") out = DType::BFloat16;
  else if (code == "F16") out = DType::Float16;
  else return false;
  return true;
}

// zlib's crc32_z treats a null buffer as "give me the initial value", so empty chunks are skipped.
uint32_t crc32_update(uint32_t crc, const void* data, size_t size) {
  if (size == 0) return crc;
  return static_cast<uint32_t>(crc32_z(crc, static_cast<const Bytef*>(data), size));
}

std::string checksum_string(uint32_t crc) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "crc32:%08x", crc);
  return buf;
}

}  // namespace safetensors_detail

namespace {

using namespace safetensors_detail;
using Json = nlohmann::ordered_json;
using Entry = SafetensorsEntry;

constexpr uint64_t kMaxHeaderBytes = 100ull << 20;  // the reference implementation's limit





// Errors while decoding: "[safetensors] <source>: <problem>".
[[noreturn]] void fail(const std::string& source, const std::string& problem) {
  throw IoError("[safetensors] " + source + ": " + problem);
}

// A JSON integer >= 0 that fits int64 (shapes and offsets become int64 in Tensor/Shape).
bool as_index(const Json& j, int64_t& out) {
  if (j.is_number_unsigned()) {
    uint64_t v = j.get<uint64_t>();
    if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return false;
    out = static_cast<int64_t>(v);
    return true;
  }
  if (j.is_number_integer() && j.get<int64_t>() >= 0) {  // "-0"
    out = j.get<int64_t>();
    return true;
  }
  return false;
}

Entry parse_entry(const std::string& name, const Json& info, uint64_t data_size, const std::string& source) {
  const std::string where = "tensor '" + name + "'";
  if (name.empty()) fail(source, "a tensor has an empty name");
  if (!info.is_object()) fail(source, where + ": entry is not an object");
  Entry e;
  e.name = name;
  auto dt = info.find("dtype");
  if (dt == info.end() || !dt->is_string()) fail(source, where + ": missing or non-string \"dtype\"");
  if (!dtype_from_code(dt->get<std::string>(), e.dtype))
    fail(source, where + ": unknown dtype '" + dt->get<std::string>() + "' (tessera reads F32, I64 and BF16)");

  auto sh = info.find("shape");
  if (sh == info.end() || !sh->is_array()) fail(source, where + ": \"shape\" is not an array of non-negative integers");
  // The product of max(dim, 1) bounds numel and every stride; refusing overflow here keeps
  // Tensor::empty and contiguous_strides free of signed overflow, even for zero-element shapes.
  int64_t bound = 1, numel = 1;
  for (const Json& d : *sh) {
    int64_t v;
    if (!as_index(d, v)) fail(source, where + ": \"shape\" is not an array of non-negative integers");
    if (__builtin_mul_overflow(bound, std::max<int64_t>(v, 1), &bound))
      fail(source, where + ": shape " + sh->dump() + " is too large");
    numel *= v;  // <= bound, so no overflow
    e.shape.push_back(v);
  }

  auto off = info.find("data_offsets");
  int64_t b, en;
  if (off == info.end() || !off->is_array() || off->size() != 2 || !as_index((*off)[0], b) || !as_index((*off)[1], en))
    fail(source, where + ": \"data_offsets\" is not an array of two non-negative integers");
  e.begin = static_cast<uint64_t>(b);
  e.end = static_cast<uint64_t>(en);
  const std::string range = "[" + std::to_string(e.begin) + ", " + std::to_string(e.end) + ")";
  if (e.begin > e.end || e.end > data_size)
    fail(source, where + ": data_offsets " + range + " lie outside the data section of " + std::to_string(data_size) +
                     " bytes");
  uint64_t nbytes;
  if (__builtin_mul_overflow(static_cast<uint64_t>(numel), dtype_size(e.dtype), &nbytes) || nbytes != e.end - e.begin)
    fail(source, where + ": data_offsets " + range + " hold " + std::to_string(e.end - e.begin) + " bytes but shape " +
                     sh->dump() + " of " + dtype_code(e.dtype) + " needs " + std::to_string(numel) + " x " +
                     std::to_string(dtype_size(e.dtype)));
  return e;
}

Metadata parse_metadata(const Json& j, const std::string& source) {
  Metadata m;
  if (j.is_null()) return m;
  if (!j.is_object()) fail(source, "\"__metadata__\" is not an object of strings");
  for (const auto& [k, v] : j.items()) {
    if (!v.is_string()) fail(source, "\"__metadata__\" value for '" + k + "' is not a string");
    m[k] = v.get<std::string>();
  }
  return m;
}

// "crc32:<8 hex digits>" -> its value; IoError naming `what` (the checksum's key) otherwise.
uint32_t parse_checksum(const std::string& s, const std::string& what, const std::string& source) {
  bool well_formed = s.size() == 14 && s.compare(0, 6, "crc32:") == 0 &&
                     std::all_of(s.begin() + 6, s.end(), [](char c) { return std::isxdigit(static_cast<unsigned char>(c)); });
  if (!well_formed) fail(source, "malformed checksum '" + s + "' in " + what + " (expected crc32:<8 hex digits>)");
  return static_cast<uint32_t>(std::stoul(s.substr(6), nullptr, 16));
}

// Each tensor's own CRC-32 first, so that a flipped bit is reported against the tensor it hit. The
// tensors tile the data section (checked before this), so when every tensor has its own checksum
// they cover every byte and the whole-section checksum would only read the data a second time; it
// is checked when some tensor has none: tessera files written before the per-tensor checksums.
// Files from other tools carry neither and load unchecked. A checksum naming a tensor the file does
// not hold is ignored: a tool that drops tensors from a file may keep its metadata.
void verify_checksums(const Metadata& m, const std::vector<Entry>& entries, std::string_view data,
                      const std::string& source) {
  bool every_tensor_checked = true;
  for (const Entry& e : entries) {
    auto it = m.find(std::string(kTensorChecksumPrefix) + e.name);
    if (it == m.end()) {
      every_tensor_checked = false;
      continue;
    }
    const uint32_t expected = parse_checksum(it->second, "'" + it->first + "'", source);
    const uint32_t actual = crc32_update(0, data.data() + e.begin, e.end - e.begin);
    if (expected != actual)
      fail(source, "tensor '" + e.name + "' is corrupt: its bytes [" + std::to_string(e.begin) + ", " +
                       std::to_string(e.end) + ") of the data section have " + checksum_string(actual) +
                       " but the metadata says " + it->second + "; restore the file from a copy or an older checkpoint");
  }
  auto it = m.find(kChecksumKey);
  if (it == m.end() || (every_tensor_checked && !entries.empty())) return;
  const uint32_t expected = parse_checksum(it->second, kChecksumKey, source);
  const uint32_t actual = crc32_update(0, data.data(), data.size());
  if (expected != actual)
    fail(source, "checksum mismatch: the file is corrupt (metadata says " + it->second + ", data has " +
                     checksum_string(actual) + "); restore the file from a copy or an older checkpoint");
}

SafetensorsLayout parse_layout(std::string_view bytes, const std::string& source) {
  if (bytes.size() < 8)
    fail(source, "file is " + std::to_string(bytes.size()) + " bytes, shorter than the 8-byte header length");
  uint64_t n;
  std::memcpy(&n, bytes.data(), 8);
  if (n > kMaxHeaderBytes)
    fail(source, "header length " + std::to_string(n) + " is above the 100 MiB limit; not a safetensors file?");
  if (n > bytes.size() - 8)
    fail(source, "header length " + std::to_string(n) + " is larger than the file (" + std::to_string(bytes.size()) +
                     " bytes); the file is truncated or not safetensors");
  std::string_view header = bytes.substr(8, n);
  std::string_view data = bytes.substr(8 + n);

  // nlohmann keeps the last of duplicate keys silently; the callback sees every top-level key.
  std::set<std::string> seen;
  std::string duplicate;
  auto on_event = [&](int depth, Json::parse_event_t event, Json& parsed) {
    if (depth == 1 && event == Json::parse_event_t::key && duplicate.empty() &&
        !seen.insert(parsed.get<std::string>()).second)
      duplicate = parsed.get<std::string>();
    return true;
  };
  Json root;
  try {
    root = Json::parse(header.begin(), header.end(), on_event);
  } catch (const nlohmann::json::exception& e) {
    fail(source, std::string("header is not valid JSON: ") + e.what());
  }
  if (!root.is_object()) fail(source, "header is not a JSON object");
  if (!duplicate.empty()) fail(source, "duplicate name '" + duplicate + "' in the header");

  SafetensorsLayout out;
  out.data = data;
  std::vector<Entry>& entries = out.entries;
  for (const auto& [key, value] : root.items()) {
    if (key == "__metadata__") out.metadata = parse_metadata(value, source);
    else entries.push_back(parse_entry(key, value, data.size(), source));
  }

  // Sorted by offset, the tensors must tile [0, data size): a gap is bytes nobody owns (a torn or
  // tampered file), an overlap would alias two tensors. Stable, so equal offsets keep header order.
  std::stable_sort(entries.begin(), entries.end(),
                   [](const Entry& a, const Entry& b) { return a.begin != b.begin ? a.begin < b.begin : a.end < b.end; });
  uint64_t pos = 0;
  const Entry* prev = nullptr;
  for (const Entry& e : entries) {
    if (e.begin < pos)
      fail(source, "tensors '" + prev->name + "' and '" + e.name + "' overlap (bytes " + std::to_string(e.begin) + " to " +
                       std::to_string(pos) + " of the data section)");
    if (e.begin > pos)
      fail(source, "bytes [" + std::to_string(pos) + ", " + std::to_string(e.begin) +
                       ") of the data section are not covered by any tensor");
    pos = e.end;
    prev = &e;
  }
  if (pos != data.size())
    fail(source, "bytes [" + std::to_string(pos) + ", " + std::to_string(data.size()) +
                     ") of the data section are not covered by any tensor");

  verify_checksums(out.metadata, entries, data, source);
  return out;
}

}  // namespace

SafetensorsLayout parse_safetensors_layout(std::string_view bytes, const std::string& source) {
  try {
    return parse_layout(bytes, source);
  } catch (const nlohmann::json::exception& e) {
    // Every JSON access above is type-checked first; this is a safety net so malformed input can
    // only ever surface as an IoError naming the file.
    fail(source, std::string("malformed header: ") + e.what());
  }
}

}  // namespace tessera::io
