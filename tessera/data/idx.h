// IDX files, the format of MNIST and Fashion-MNIST (http://yann.lecun.com/exdb/mnist/): a 4-byte
// magic (0, 0, element type, number of dims), the dims as big-endian uint32, then the elements in
// row-major order. Files may be gzipped, as they are distributed.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "tessera/core/shape.h"

namespace tessera::data {

struct IdxArray {
  Shape shape;
  std::vector<uint8_t> data;  // shape_numel(shape) bytes, row-major
};

// Reads an IDX file, gunzipping it when it starts with the gzip magic (1f 8b). Only unsigned-byte
// elements (type 0x08) are supported: NotSupportedError for the others. Anything malformed —
// a missing file, a bad magic, a truncated file, trailing bytes, a corrupt gzip stream — is an
// IoError that starts with "[idx]" and names the file.
IdxArray read_idx(const std::string& path);
// The same from the file's bytes; `source` names it in errors.
IdxArray decode_idx(std::vector<uint8_t> bytes, const std::string& source);

}  // namespace tessera::data
