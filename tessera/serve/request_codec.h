// The JSON of `tessera serve`'s /v1/predict, both ways, as pure functions (fuzz/serve_request_fuzz.cpp
// feeds them any bytes). A request body is one of
//   {"inputs": [[...], ...], "top_k": 3}          nested arrays: one sample, or a batch of them
//   {"inputs": {"b64": "...", "shape": [N, ...], "dtype": "float32"}, "top_k": 3}
//                                                  little-endian float32 (int64 for word ids)
//   {"prompt": "text", "tokens": 100, "temperature": 0.8, "top_k": 0, "seed": 0}   the char-LM
// and every problem in one (malformed JSON, a ragged array, a shape the model does not take, an id
// out of range, a field of the wrong type) is a ValueError whose message names it: the server answers
// 400 with that message.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "tessera/core/dtype.h"
#include "tessera/core/shape.h"

namespace tessera::serve {

// What the model takes, as the request parser needs it.
struct InputSpec {
  Shape sample_shape;              // one sample; a flattened sample is also accepted
  DType dtype = DType::Float32;    // Float32, or Int64 (word ids of bow: any bag length)
  int64_t id_bound = 0;            // Int64: ids must lie in [0, id_bound)
  std::string description;         // "[N, 1, 28, 28] or [N, 784] float32", for messages
};

struct PredictInputs {
  Shape shape;                  // [n, *sample_shape]
  std::vector<float> values;    // Float32 models
  std::vector<int64_t> ids;     // Int64 models
  int64_t top_k = 3;            // classes listed per sample (clamped to the model's outputs)
  int64_t samples() const { return shape.empty() ? 0 : shape[0]; }
};

struct GenerateParams {
  std::string prompt;
  int64_t tokens = 100;
  float temperature = 0.8f;
  int64_t top_k = 0;
  uint64_t seed = 0;
};

struct RequestLimits {
  int64_t max_samples = 4096;      // per request
  int64_t max_tokens = 4096;       // generated per request
};

PredictInputs parse_predict_request(const std::string& body, const InputSpec& spec, const RequestLimits& limits);
GenerateParams parse_generate_request(const std::string& body, const RequestLimits& limits);

// The reply to a predict request: outputs is [n, k] row-major (probabilities, or k = 1 values of a
// regression). {"outputs": [{"label": 3, "probabilities": [...], "top_k": [{"label": 3,
// "probability": 0.91}, ...]}, ...]} for classifiers, {"outputs": [{"value": 1.5}, ...]} otherwise.
std::string encode_predictions(const float* outputs, int64_t n, int64_t k, bool regression, int64_t top_k);
std::string encode_generation(const std::string& text);
// {"error": message}: every 4xx/5xx body.
std::string encode_error(const std::string& message);

}  // namespace tessera::serve
