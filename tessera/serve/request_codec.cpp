#include "tessera/serve/request_codec.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <numeric>

#include "tessera/core/error.h"
#include "tessera/util/base64.h"

namespace tessera::serve {

namespace {

using nlohmann::json;
using tessera::detail::concat;

constexpr int64_t kMaxDim = int64_t{1} << 31;

json parse_body(const std::string& body) {
  json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  TESSERA_CHECK(!j.is_discarded(), "[serve] the body is not valid JSON (", body.size(), " bytes)");
  TESSERA_CHECK(j.is_object(), "[serve] the body must be a JSON object, got a ", j.type_name());
  return j;
}

void check_fields(const json& j, std::initializer_list<const char*> known) {
  for (const auto& item : j.items()) {
    bool ok = false;
    for (const char* k : known) ok = ok || item.key() == k;
    if (!ok) {
      std::string list;
      for (const char* k : known) list += std::string(list.empty() ? "" : ", ") + k;
      throw ValueError(concat("[serve] unknown field '", item.key(), "'; this model takes ", list));
    }
  }
}

template <typename T>
T integer_field(const json& j, const char* key, T fallback, T lo, T hi) {
  auto it = j.find(key);
  if (it == j.end()) return fallback;
  TESSERA_CHECK(it->is_number_integer(), "[serve] '", key, "' must be an integer, got ", it->dump().substr(0, 40));
  const auto v = it->is_number_unsigned() ? static_cast<long double>(it->get<uint64_t>())
                                          : static_cast<long double>(it->get<int64_t>());
  TESSERA_CHECK(v >= static_cast<long double>(lo) && v <= static_cast<long double>(hi), "[serve] '", key, "' = ",
                it->dump(), " is outside [", lo, ", ", hi, "]");
  return it->is_number_unsigned() ? static_cast<T>(it->get<uint64_t>()) : static_cast<T>(it->get<int64_t>());
}

// The shape of a nested array (ragged: ValueError naming where), at most `max_rank` deep.
void nested_shape(const json& j, size_t depth, size_t max_rank, Shape& shape, const std::string& where) {
  if (!j.is_array()) return;
  TESSERA_CHECK(depth < max_rank, "[serve] ", where, " is nested deeper than the ", max_rank,
                " levels a batch of this model's samples has");
  TESSERA_CHECK(!j.empty(), "[serve] ", where, " is an empty array");
  if (shape.size() == depth) shape.push_back(static_cast<int64_t>(j.size()));
  TESSERA_CHECK(shape[depth] == static_cast<int64_t>(j.size()), "[serve] ", where, " has ", j.size(),
                " elements where its siblings have ", shape[depth], " (inputs must be rectangular)");
  nested_shape(j[0], depth + 1, max_rank, shape, where + "[0]");
}

template <typename T>
void flatten_values(const json& j, const Shape& shape, size_t depth, std::vector<T>& out, std::string& where) {
  const size_t mark = where.size();
  TESSERA_CHECK(j.is_array() == (depth < shape.size()), "[serve] inputs", where,
                depth < shape.size() ? " should be an array" : " should be a number", " (inputs must be rectangular)");
  if (depth < shape.size()) {
    TESSERA_CHECK(static_cast<int64_t>(j.size()) == shape[depth], "[serve] inputs", where, " has ", j.size(),
                  " elements where its siblings have ", shape[depth], " (inputs must be rectangular)");
    for (size_t i = 0; i < j.size(); ++i) {
      where += "[" + std::to_string(i) + "]";
      flatten_values(j[i], shape, depth + 1, out, where);
      where.resize(mark);
    }
    return;
  }
  if constexpr (std::is_same_v<T, float>) {
    TESSERA_CHECK(j.is_number(), "[serve] inputs", where, " is ", j.type_name(), ", not a number");
    const float v = j.get<float>();
    TESSERA_CHECK(std::isfinite(v), "[serve] inputs", where, " = ", j.dump(), " is outside float32's range");
    out.push_back(v);
  } else {
    TESSERA_CHECK(j.is_number_integer(), "[serve] inputs", where, " is ", j.dump().substr(0, 24),
                  ", not an integer word id");
    out.push_back(j.is_number_unsigned() ? static_cast<int64_t>(std::min<uint64_t>(j.get<uint64_t>(), INT64_MAX))
                                         : j.get<int64_t>());
  }
}

// [n, *sample] from what the request sent: a sample, a batch, or either flattened.
Shape batch_shape(const Shape& sent, const InputSpec& spec) {
  const Shape& s = spec.sample_shape;
  const int64_t flat = shape_numel(s);
  auto with_batch = [&](int64_t n) {
    Shape b{n};
    b.insert(b.end(), s.begin(), s.end());
    return b;
  };
  if (spec.dtype == DType::Int64) {  // bags of any length
    if (sent.size() == 1) return Shape{1, sent[0]};
    if (sent.size() == 2) return sent;
  } else {
    if (sent == s) return with_batch(1);
    if (sent.size() == s.size() + 1 && std::equal(s.begin(), s.end(), sent.begin() + 1)) return sent;
    if (s.size() > 1 && sent == Shape{flat}) return with_batch(1);
    if (s.size() > 1 && sent.size() == 2 && sent[1] == flat) return with_batch(sent[0]);
  }
  throw ValueError(concat("[serve] inputs have shape ", shape_str(sent), "; the model takes ", spec.description));
}

void check_ids(const std::vector<int64_t>& ids, const InputSpec& spec) {
  for (size_t i = 0; i < ids.size(); ++i)
    TESSERA_CHECK(ids[i] >= 0 && ids[i] < spec.id_bound, "[serve] word id ", ids[i], " (element ", i,
                  ") is outside [0, ", spec.id_bound, ")");
}

void append_float(std::string& out, float v) {
  char buf[32];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, end);
}

}  // namespace

PredictInputs parse_predict_request(const std::string& body, const InputSpec& spec, const RequestLimits& limits) {
  json j = parse_body(body);
  check_fields(j, {"inputs", "top_k"});
  auto in = j.find("inputs");
  TESSERA_CHECK(in != j.end(), "[serve] the body has no 'inputs'; send {\"inputs\": ", spec.description, "}");
  PredictInputs out;
  out.top_k = integer_field<int64_t>(j, "top_k", 3, 0, 1 << 20);
  Shape sent;
  if (in->is_object()) {
    check_fields(*in, {"b64", "shape", "dtype"});
    auto b64 = in->find("b64");
    auto shape = in->find("shape");
    TESSERA_CHECK(b64 != in->end() && b64->is_string(), "[serve] inputs.b64 must be a base64 string");
    TESSERA_CHECK(shape != in->end() && shape->is_array() && !shape->empty() && shape->size() <= 8,
                  "[serve] inputs.shape must be an array of 1 to 8 sizes");
    const std::string want = spec.dtype == DType::Int64 ? "int64" : "float32";
    if (auto dt = in->find("dtype"); dt != in->end())
      TESSERA_CHECK(dt->is_string() && dt->get<std::string>() == want, "[serve] inputs.dtype is ", dt->dump(),
                    "; this model takes ", want);
    std::string bytes = base64_decode(b64->get<std::string>());
    const size_t elem = dtype_size(spec.dtype);
    uint64_t count = 1;
    for (const auto& d : *shape) {
      TESSERA_CHECK(d.is_number_integer() && d.get<int64_t>() > 0 && d.get<int64_t>() < kMaxDim,
                    "[serve] inputs.shape ", shape->dump(), " must hold positive sizes");
      count *= static_cast<uint64_t>(d.get<int64_t>());
      TESSERA_CHECK(count <= bytes.size() / elem, "[serve] inputs.shape ", shape->dump(), " needs more than the ",
                    bytes.size(), " bytes inputs.b64 holds");
      sent.push_back(d.get<int64_t>());
    }
    TESSERA_CHECK(count * elem == bytes.size(), "[serve] inputs.shape ", shape->dump(), " is ", count * elem,
                  " bytes of ", want, "; inputs.b64 holds ", bytes.size());
    out.shape = batch_shape(sent, spec);
    if (spec.dtype == DType::Int64) {
      out.ids.resize(count);
      std::memcpy(out.ids.data(), bytes.data(), bytes.size());
    } else {
      out.values.resize(count);
      std::memcpy(out.values.data(), bytes.data(), bytes.size());
      for (size_t i = 0; i < count; ++i)
        TESSERA_CHECK(std::isfinite(out.values[i]), "[serve] inputs element ", i, " is ", out.values[i],
                      "; inputs must be finite");
    }
  } else {
    TESSERA_CHECK(in->is_array(), "[serve] 'inputs' must be an array or {\"b64\", \"shape\"}, got a ", in->type_name());
    nested_shape(*in, 0, spec.sample_shape.size() + 1, sent, "inputs");
    out.shape = batch_shape(sent, spec);
    std::string where;
    if (spec.dtype == DType::Int64) flatten_values(*in, sent, 0, out.ids, where);
    else flatten_values(*in, sent, 0, out.values, where);
  }
  TESSERA_CHECK(out.samples() <= limits.max_samples, "[serve] ", out.samples(), " samples in one request; the limit is ",
                limits.max_samples);
  if (spec.dtype == DType::Int64) check_ids(out.ids, spec);
  return out;
}

GenerateParams parse_generate_request(const std::string& body, const RequestLimits& limits) {
  json j = parse_body(body);
  check_fields(j, {"prompt", "tokens", "temperature", "top_k", "seed"});
  auto prompt = j.find("prompt");
  TESSERA_CHECK(prompt != j.end() && prompt->is_string(), "[serve] this model generates text: send {\"prompt\": \"...\"}");
  GenerateParams p;
  p.prompt = prompt->get<std::string>();
  p.tokens = integer_field<int64_t>(j, "tokens", 100, 1, limits.max_tokens);
  p.top_k = integer_field<int64_t>(j, "top_k", 0, 0, 1 << 20);
  p.seed = integer_field<uint64_t>(j, "seed", 0, 0, UINT64_MAX);
  if (auto t = j.find("temperature"); t != j.end()) {
    TESSERA_CHECK(t->is_number() && t->get<double>() > 0 && t->get<double>() <= 100, "[serve] 'temperature' = ",
                  t->dump(), " must be a number in (0, 100]");
    p.temperature = t->get<float>();
  }
  return p;
}

std::string encode_predictions(const float* outputs, int64_t n, int64_t k, bool regression, int64_t top_k) {
  std::string out = "{\"outputs\":[";
  std::vector<int64_t> order(static_cast<size_t>(k));
  for (int64_t i = 0; i < n; ++i) {
    const float* row = outputs + i * k;
    if (i) out += ',';
    if (regression) {
      out += "{\"value\":";
      append_float(out, row[0]);
      out += '}';
      continue;
    }
    std::iota(order.begin(), order.end(), 0);
    const int64_t listed = std::min(top_k, k);
    std::partial_sort(order.begin(), order.begin() + std::max<int64_t>(listed, 1), order.end(),
                      [&](int64_t a, int64_t b) { return row[a] > row[b] || (row[a] == row[b] && a < b); });
    out += "{\"label\":" + std::to_string(order[0]) + ",\"probabilities\":[";
    for (int64_t c = 0; c < k; ++c) {
      if (c) out += ',';
      append_float(out, row[c]);
    }
    out += "],\"top_k\":[";
    for (int64_t c = 0; c < listed; ++c) {
      if (c) out += ',';
      out += "{\"label\":" + std::to_string(order[c]) + ",\"probability\":";
      append_float(out, row[order[c]]);
      out += '}';
    }
    out += "]}";
  }
  return out + "]}";
}

std::string encode_generation(const std::string& text) { return json{{"text", text}}.dump(-1, ' ', false, json::error_handler_t::replace); }

std::string encode_error(const std::string& message) {
  return json{{"error", message}}.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace tessera::serve
