#include "tessera/parallel/pipeline/stage_header.h"

#include "tessera/core/error.h"

namespace tessera::parallel::pipeline {

StageHeader encode_stage_header(const Shape& shape, DType dtype) {
  TESSERA_CHECK(dtype == DType::Float32 || dtype == DType::Int64 || dtype == DType::BFloat16,
                "[pipeline] a stage can only send float32, int64 or bfloat16 tensors, got ", dtype_name(dtype));
  TESSERA_CHECK(static_cast<int64_t>(shape.size()) <= kStageHeaderMaxDims, "[pipeline] a stage cannot send a tensor of ",
                shape.size(), " dimensions (at most ", kStageHeaderMaxDims, ")");
  StageHeader h{};
  h[0] = dtype == DType::Float32 ? 0 : dtype == DType::Int64 ? 1 : 2;
  h[1] = static_cast<int64_t>(shape.size());
  for (size_t i = 0; i < shape.size(); ++i) h[2 + i] = shape[i];
  return h;
}

StageTensorSpec decode_stage_header(const StageHeader& h, const std::string& context) {
  if (h[0] < 0 || h[0] > 2 || h[1] < 0 || h[1] > kStageHeaderMaxDims)
    throw ValueError(context + ": malformed header (dtype code " + std::to_string(h[0]) + ", rank " +
                     std::to_string(h[1]) + ")");
  StageTensorSpec spec;
  spec.dtype = h[0] == 0 ? DType::Float32 : h[0] == 1 ? DType::Int64 : DType::BFloat16;
  const int64_t element_bytes = static_cast<int64_t>(dtype_size(spec.dtype));
  int64_t bytes = element_bytes;
  for (int64_t i = 0; i < kStageHeaderMaxDims; ++i) {
    const int64_t d = h[2 + i];
    if (i >= h[1]) {
      if (d != 0) throw ValueError(context + ": malformed header (a size past the tensor's rank)");
      continue;
    }
    if (d < 0) throw ValueError(context + ": malformed header (negative size " + std::to_string(d) + ")");
    spec.shape.push_back(d);
    // bytes stays <= kStageMessageMaxBytes, so the product below cannot overflow before it is refused.
    if (d != 0 && bytes > kStageMessageMaxBytes / d)
      bytes = kStageMessageMaxBytes + 1;
    else
      bytes *= d;
  }
  for (int64_t d : spec.shape)
    if (d == 0) bytes = 0;  // an empty tensor announces no payload
  if (bytes > kStageMessageMaxBytes)
    throw ValueError(context + ": header announces a tensor of shape " + shape_str(spec.shape) + " (over " +
                     std::to_string(kStageMessageMaxBytes >> 30) + " GiB): refused before allocating it");
  return spec;
}

}  // namespace tessera::parallel::pipeline
