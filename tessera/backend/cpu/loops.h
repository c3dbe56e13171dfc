// Strided iteration for elementwise kernels. Operands are given already broadcast to the iteration
// shape (stride 0 on broadcast dims). Size-1 dims are dropped and adjacent dims that are contiguous in
// every operand are merged, so the common cases (contiguous, row-broadcast bias) become one or two
// flat loops whose inner stride is 1 or 0 and which the compiler vectorises.
#pragma once
#include <array>
#include <cstdint>
#include <vector>

#include "tessera/core/shape.h"
#include "tessera/util/thread_pool.h"

namespace tessera::cpu {

template <size_t N>
struct StridedLayout {
  Shape sizes;                        // coalesced, innermost last
  std::array<Shape, N> strides;       // per operand, per coalesced dim
};

template <size_t N>
StridedLayout<N> coalesce(const Shape& shape, const std::array<const Shape*, N>& strides) {
  StridedLayout<N> out;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    if (!out.sizes.empty()) {
      bool mergeable = true;
      for (size_t k = 0; k < N; ++k)
        if (out.strides[k].back() != (*strides[k])[d] * shape[d]) mergeable = false;
      if (mergeable) {
        out.sizes.back() *= shape[d];
        for (size_t k = 0; k < N; ++k) out.strides[k].back() = (*strides[k])[d];
        continue;
      }
    }
    out.sizes.push_back(shape[d]);
    for (size_t k = 0; k < N; ++k) out.strides[k].push_back((*strides[k])[d]);
  }
  if (out.sizes.empty()) {
    out.sizes.push_back(1);
    for (size_t k = 0; k < N; ++k) out.strides[k].push_back(0);
  }
  return out;
}

// Calls inner(n, offsets, inner_strides) for every innermost row; offsets are element offsets of the
// row start per operand. Rows are split across threads when the tensor is large.
template <size_t N, typename F>
void for_each_row(const Shape& shape, const std::array<const Shape*, N>& strides, const F& inner,
                  int64_t grain = 32768) {
  if (shape_numel(shape) == 0) return;
  StridedLayout<N> L = coalesce<N>(shape, strides);
  const int64_t nd = static_cast<int64_t>(L.sizes.size());
  const int64_t inner_n = L.sizes.back();
  std::array<int64_t, N> inner_strides;
  for (size_t k = 0; k < N; ++k) inner_strides[k] = L.strides[k].back();
  int64_t rows = shape_numel(L.sizes) / inner_n;
  int64_t row_grain = std::max<int64_t>(1, grain / std::max<int64_t>(inner_n, 1));
  parallel_for(0, rows, row_grain, [&](int64_t r0, int64_t r1) {
    // Multi-index of row r0 over the outer dims.
    std::vector<int64_t> idx(nd, 0);
    std::array<int64_t, N> off{};
    int64_t r = r0;
    for (int64_t d = nd - 2; d >= 0; --d) {
      idx[d] = r % L.sizes[d];
      r /= L.sizes[d];
      for (size_t k = 0; k < N; ++k) off[k] += idx[d] * L.strides[k][d];
    }
    for (int64_t row = r0; row < r1; ++row) {
      inner(inner_n, off, inner_strides);
      for (int64_t d = nd - 2; d >= 0; --d) {
        ++idx[d];
        for (size_t k = 0; k < N; ++k) off[k] += L.strides[k][d];
        if (idx[d] < L.sizes[d]) break;
        for (size_t k = 0; k < N; ++k) off[k] -= idx[d] * L.strides[k][d];
        idx[d] = 0;
      }
    }
  });
}

}  // namespace tessera::cpu
