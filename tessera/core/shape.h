// Shapes and strides (in elements) and the helpers every op needs to validate them.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace tessera {

using Shape = std::vector<int64_t>;

std::string shape_str(const Shape& shape);
int64_t shape_numel(const Shape& shape);
Shape contiguous_strides(const Shape& shape);
// NumPy broadcasting; `op` names the caller in the error.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);
// Maps a possibly negative dim into [0, ndim); `op` names the caller in the error.
int64_t normalize_dim(int64_t dim, int64_t ndim, const char* op);

}  // namespace tessera
