// The header a pipeline stage sends before each tensor (p2p.h), so that the receiver needs no shape
// in advance: kStageHeaderSize int64 values, [dtype code (0 float32, 1 int64, 2 bfloat16), rank, size_0 ..
// size_7] (sizes past the rank are 0). The one contract between two stages' processes: written and
// read here only, and fuzzed (fuzz/stage_header_fuzz.cpp), since it arrives from another process.
#pragma once
#include <array>
#include <cstdint>
#include <string>

#include "tessera/core/dtype.h"
#include "tessera/core/shape.h"

namespace tessera::parallel::pipeline {

constexpr int64_t kStageHeaderMaxDims = 8;
constexpr int64_t kStageHeaderSize = 2 + kStageHeaderMaxDims;
// A header announcing more than this is refused before anything is allocated: 16 GiB, far above
// any activation a stage sends, far below what a corrupt or hostile size would claim.
constexpr int64_t kStageMessageMaxBytes = int64_t{1} << 34;

using StageHeader = std::array<int64_t, kStageHeaderSize>;

struct StageTensorSpec {
  Shape shape;
  DType dtype = DType::Float32;
};

// ValueError for a dtype other than float32/int64/bfloat16 or more than kStageHeaderMaxDims dimensions.
StageHeader encode_stage_header(const Shape& shape, DType dtype);

// The tensor a header announces. ValueError, with `context` in front, for an unknown dtype code, a
// rank outside [0, 8], a negative size, nonzero sizes past the rank, or a tensor over
// kStageMessageMaxBytes (checked without overflow).
StageTensorSpec decode_stage_header(const StageHeader& header, const std::string& context);

}  // namespace tessera::parallel::pipeline
