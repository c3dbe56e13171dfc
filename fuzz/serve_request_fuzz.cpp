// Fuzz target: the body of a request to `tessera serve` (serve/request_codec.h). Any bytes end in
// inputs that fit the model's spec or a ValueError, never another exception, a read out of bounds,
// an unbounded allocation or a crash; accepted inputs always hold shape-many values in range.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "tessera/core/error.h"
#include "tessera/serve/request_codec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera;
  using namespace tessera::serve;
  const std::string body(reinterpret_cast<const char*>(data), size);
  static const InputSpec specs[] = {{{1, 28, 28}, DType::Float32, 0, "images"},
                                    {{4}, DType::Float32, 0, "rows"},
                                    {{8}, DType::Int64, 100, "bags"}};
  RequestLimits limits;
  limits.max_samples = 64;
  for (const auto& spec : specs) {
    try {
      PredictInputs in = parse_predict_request(body, spec, limits);
      const int64_t n = shape_numel(in.shape);
      const size_t held = spec.dtype == DType::Int64 ? in.ids.size() : in.values.size();
      if (in.samples() < 1 || in.samples() > limits.max_samples || static_cast<int64_t>(held) != n) std::abort();
      for (int64_t id : in.ids)
        if (id < 0 || id >= spec.id_bound) std::abort();
    } catch (const ValueError&) {
    }
  }
  try {
    GenerateParams g = parse_generate_request(body, limits);
    if (g.tokens < 1 || g.tokens > limits.max_tokens || !(g.temperature > 0)) std::abort();
  } catch (const ValueError&) {
  }
  return 0;
}
