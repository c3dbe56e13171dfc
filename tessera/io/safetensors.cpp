#include "tessera/io/safetensors.h"

#include <zlib.h>

#include <algorithm>
#include <cctype>
#include <bit>
#include <cstdio>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <string_view>
#include <vector>

#include "tessera/core/error.h"
#include "tessera/io/atomic_file.h"
#include "tessera/io/safetensors_layout.h"

namespace tessera::io {

// The format is little-endian; we copy tensor bytes as they lie in memory.
static_assert(sizeof(z_off_t) == 8, "crc32_combine must take tensor sizes past 2 GiB");

namespace {

using namespace safetensors_detail;
// ordered_json keeps the header in the order we write it (metadata first, then tensors in
// state_dict order), as the reference implementation does, so the files diff and read naturally.
using Json = nlohmann::ordered_json;

// `dest` names the file being written (empty when encoding to memory) in ValueErrors.
std::string encode_impl(const nn::StateDict& tensors, const Metadata& metadata, const std::string& dest) {
  const std::string prefix = dest.empty() ? "[safetensors] cannot encode: " : "[safetensors] cannot write " + dest + ": ";
  std::set<std::string> names;
  std::vector<Tensor> contiguous;
  contiguous.reserve(tensors.size());
  uint32_t crc = 0;
  uint64_t total = 0;
  Metadata meta = metadata;
  std::erase_if(meta, [](const auto& kv) { return kv.first.starts_with(kTensorChecksumPrefix); });  // stale ones
  for (const auto& [name, t] : tensors) {
    TESSERA_CHECK(!name.empty(), prefix, "a tensor has an empty name");
    TESSERA_CHECK(name != "__metadata__", prefix, "'__metadata__' is reserved by the format and cannot name a tensor");
    TESSERA_CHECK(names.insert(name).second, prefix, "duplicate tensor name '", name, "'");
    TESSERA_CHECK(t.defined(), prefix, "tensor '", name, "' is undefined");
    // detach: serialising must not record autograd history.
    // A device's tensor is written from a host copy, so a checkpoint saved on the GPU loads anywhere.
    Tensor c = !t.device().is_cpu() ? t.detach().cpu() : t.is_contiguous() ? t : t.detach().contiguous();
    size_t nbytes = static_cast<size_t>(c.numel()) * dtype_size(c.dtype());
    // One pass over the bytes: the whole-section CRC is combined from the tensors' own.
    const uint32_t tensor_crc = crc32_update(0, c.raw_data(), nbytes);
    crc = static_cast<uint32_t>(crc32_combine(crc, tensor_crc, static_cast<z_off_t>(nbytes)));
    meta[std::string(kTensorChecksumPrefix) + name] = checksum_string(tensor_crc);
    total += nbytes;
    contiguous.push_back(std::move(c));
  }

  Json header = Json::object();
  meta[kChecksumKey] = checksum_string(crc);
  header["__metadata__"] = meta;
  uint64_t offset = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& c = contiguous[i];
    uint64_t nbytes = static_cast<uint64_t>(c.numel()) * dtype_size(c.dtype());
    header[tensors[i].first] = {{"dtype", dtype_code(c.dtype())}, {"shape", c.shape()}, {"data_offsets", {offset, offset + nbytes}}};
    offset += nbytes;
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const nlohmann::json::exception& e) {  // invalid UTF-8 in a name or metadata
    throw ValueError(prefix + "tensor names and metadata must be valid UTF-8 (" + e.what() + ")");
  }
  // Pad with spaces (valid trailing JSON whitespace) so the data section starts 8-aligned, as the
  // reference implementation does; readers that mmap the file can then view the tensors in place.
  text.append((8 - text.size() % 8) % 8, ' ');

  std::string out;
  out.reserve(8 + text.size() + total);
  uint64_t n = text.size();
  out.append(reinterpret_cast<const char*>(&n), 8);
  out += text;
  for (const Tensor& c : contiguous) {
    size_t nbytes = static_cast<size_t>(c.numel()) * dtype_size(c.dtype());
    if (nbytes > 0) out.append(static_cast<const char*>(c.raw_data()), nbytes);
  }
  return out;
}

}  // namespace

std::string encode_safetensors(const nn::StateDict& tensors, const Metadata& metadata) {
  return encode_impl(tensors, metadata, "");
}

SafetensorsFile decode_safetensors(std::string_view bytes, const std::string& source) {
  SafetensorsLayout layout = parse_safetensors_layout(bytes, source);
  SafetensorsFile out;
  out.metadata = std::move(layout.metadata);
  out.tensors.reserve(layout.entries.size());
  for (const SafetensorsEntry& e : layout.entries) {
    Tensor t = Tensor::empty(e.shape, e.dtype);
    if (e.end > e.begin) std::memcpy(t.raw_data(), layout.data.data() + e.begin, e.end - e.begin);
    out.tensors.emplace_back(e.name, std::move(t));
  }
  return out;
}

void save_safetensors(const std::string& path, const nn::StateDict& tensors, const Metadata& metadata) {
  write_file_atomic(path, encode_impl(tensors, metadata, path));
}

SafetensorsFile load_safetensors(const std::string& path) { return decode_safetensors(read_file(path), path); }

}  // namespace tessera::io
