#include "tessera/serve/request_codec.h"

#include <gtest/gtest.h>

#include <cstring>
#include <nlohmann/json.hpp>

#include "tessera/core/error.h"
#include "tessera/util/base64.h"

namespace tessera::serve {
namespace {

InputSpec image_spec() { return {{1, 2, 2}, DType::Float32, 0, "[N, 1, 2, 2] or [N, 4] float32"}; }
InputSpec bag_spec() { return {{3}, DType::Int64, 10, "[N, L] int64 word ids below 10"}; }

std::string message_of(const std::string& body, const InputSpec& spec) {
  try {
    parse_predict_request(body, spec, RequestLimits{});
  } catch (const ValueError& e) {
    return e.what();
  }
  return "(accepted)";
}

TEST(ServeRequest, NestedArraysInEveryAcceptedLayoutGiveABatch) {
  const InputSpec spec = image_spec();
  PredictInputs one = parse_predict_request(R"({"inputs": [[[1, 2], [3, 4]]]})", spec, {});
  EXPECT_EQ(one.shape, (Shape{1, 1, 2, 2}));
  EXPECT_EQ(one.values, (std::vector<float>{1, 2, 3, 4}));
  EXPECT_EQ(one.top_k, 3);
  PredictInputs two = parse_predict_request(R"({"inputs": [[[[1, 2], [3, 4]]], [[[5, 6], [7, 8.5]]]], "top_k": 1})", spec, {});
  EXPECT_EQ(two.shape, (Shape{2, 1, 2, 2}));
  EXPECT_EQ(two.values.back(), 8.5f);
  EXPECT_EQ(two.top_k, 1);
  EXPECT_EQ(parse_predict_request(R"({"inputs": [1, 2, 3, 4]})", spec, {}).shape, (Shape{1, 1, 2, 2}));
  EXPECT_EQ(parse_predict_request(R"({"inputs": [[1, 2, 3, 4], [5, 6, 7, 8]]})", spec, {}).shape, (Shape{2, 1, 2, 2}));
}

TEST(ServeRequest, Base64Float32EqualsTheNestedArrays) {
  const InputSpec spec = image_spec();
  const std::vector<float> v{0.5f, -1.25f, 3.0f, 1e-3f, 7, 8, 9, 10};
  std::string bytes(v.size() * 4, '\0');
  std::memcpy(bytes.data(), v.data(), bytes.size());
  nlohmann::json j{{"inputs", {{"b64", base64_encode(bytes)}, {"shape", {2, 4}}, {"dtype", "float32"}}}};
  PredictInputs in = parse_predict_request(j.dump(), spec, {});
  EXPECT_EQ(in.shape, (Shape{2, 1, 2, 2}));
  EXPECT_EQ(in.values, v);
}

TEST(ServeRequest, EveryBadInputNamesItsProblem) {
  const InputSpec spec = image_spec();
  EXPECT_NE(message_of("{not json", spec).find("not valid JSON"), std::string::npos);
  EXPECT_NE(message_of("[1, 2]", spec).find("must be a JSON object"), std::string::npos);
  EXPECT_NE(message_of("{}", spec).find("no 'inputs'"), std::string::npos);
  EXPECT_NE(message_of(R"({"input": [1]})", spec).find("unknown field 'input'"), std::string::npos);
  EXPECT_NE(message_of(R"({"inputs": [1, 2, 3]})", spec).find("shape [3]; the model takes [N, 1, 2, 2]"), std::string::npos);
  EXPECT_NE(message_of(R"({"inputs": [[1, 2, 3, 4], [5, 6, 7]]})", spec).find("rectangular"), std::string::npos);
  EXPECT_NE(message_of(R"({"inputs": [[1, 2, 3, 4], 5]})", spec).find("rectangular"), std::string::npos);
  EXPECT_NE(message_of(R"({"inputs": [1, 2, "x", 4]})", spec).find("inputs[2] is string, not a number"), std::string::npos);
  EXPECT_NE(message_of(R"({"inputs": [1, 2, 1e300, 4]})", spec).find("outside float32's range"), std::string::npos);
  EXPECT_NE(message_of(R"({"inputs": []})", spec).find("empty array"), std::string::npos);
  EXPECT_NE(message_of(R"({"inputs": [[[[[1]]]]]})", spec).find("nested deeper"), std::string::npos);
  EXPECT_NE(message_of(R"({"inputs": 3})", spec).find("must be an array"), std::string::npos);
  EXPECT_NE(message_of(R"({"inputs": [1, 2, 3, 4], "top_k": -1})", spec).find("'top_k'"), std::string::npos);
  EXPECT_NE(message_of(R"({"inputs": [1, 2, 3, 4], "top_k": 1.5})", spec).find("must be an integer"), std::string::npos);
  // base64: wrong length for the shape, a bad character, a wrong dtype, a shape of zeros.
  EXPECT_NE(message_of(R"({"inputs": {"b64": "AAAAAAAAAAA=", "shape": [1, 4]}})", spec).find("needs more than the 8 bytes"),
            std::string::npos);
  EXPECT_NE(message_of(R"({"inputs": {"b64": "AA*A", "shape": [1]}})", spec).find("not in the base64 alphabet"),
            std::string::npos);
  EXPECT_NE(message_of(R"({"inputs": {"b64": "AAAAAA==", "shape": [1], "dtype": "int64"}})", spec).find("takes float32"),
            std::string::npos);
  EXPECT_NE(message_of(R"({"inputs": {"b64": "", "shape": [0]}})", spec).find("positive sizes"), std::string::npos);
  EXPECT_NE(message_of(R"({"inputs": {"b64": "AAAAAA==", "shape": [4294967296, 4294967296]}})", spec).find("positive sizes"),
            std::string::npos);
  // A non-finite float32 sent as bytes.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::string bytes(16, '\0');
  std::memcpy(bytes.data() + 4, &nan, 4);
  nlohmann::json j{{"inputs", {{"b64", base64_encode(bytes)}, {"shape", {1, 4}}}}};
  EXPECT_NE(message_of(j.dump(), spec).find("element 1 is nan"), std::string::npos);
}

TEST(ServeRequest, TooManySamplesIsRefused) {
  RequestLimits limits;
  limits.max_samples = 2;
  EXPECT_THROW(parse_predict_request(R"({"inputs": [[1,2,3,4],[1,2,3,4],[1,2,3,4]]})", image_spec(), limits), ValueError);
  EXPECT_NO_THROW(parse_predict_request(R"({"inputs": [[1,2,3,4],[1,2,3,4]]})", image_spec(), limits));
}

TEST(ServeRequest, WordIdsAreIntegersInsideTheVocabularyInBagsOfAnyLength) {
  const InputSpec spec = bag_spec();
  PredictInputs in = parse_predict_request(R"({"inputs": [[1, 2, 9, 0, 4]]})", spec, {});
  EXPECT_EQ(in.shape, (Shape{1, 5}));
  EXPECT_EQ(in.ids, (std::vector<int64_t>{1, 2, 9, 0, 4}));
  EXPECT_EQ(parse_predict_request(R"({"inputs": [3, 4]})", spec, {}).shape, (Shape{1, 2}));
  EXPECT_NE(message_of(R"({"inputs": [[1, 10]]})", spec).find("word id 10 (element 1) is outside [0, 10)"), std::string::npos);
  EXPECT_NE(message_of(R"({"inputs": [[1, -1]]})", spec).find("outside [0, 10)"), std::string::npos);
  EXPECT_NE(message_of(R"({"inputs": [[1, 2.5]]})", spec).find("not an integer word id"), std::string::npos);
  EXPECT_NE(message_of(R"({"inputs": [[1, 18446744073709551615]]})", spec).find("outside [0, 10)"), std::string::npos);
}

TEST(ServeRequest, GenerateRequestsHaveDefaultsAndBounds) {
  GenerateParams p = parse_generate_request(R"({"prompt": "Hi"})", {});
  EXPECT_EQ(p.prompt, "Hi");
  EXPECT_EQ(p.tokens, 100);
  EXPECT_FLOAT_EQ(p.temperature, 0.8f);
  p = parse_generate_request(R"({"prompt": "a", "tokens": 5, "temperature": 1.5, "top_k": 3, "seed": 7})", {});
  EXPECT_EQ(p.tokens, 5);
  EXPECT_EQ(p.top_k, 3);
  EXPECT_EQ(p.seed, 7u);
  EXPECT_THROW(parse_generate_request(R"({"prompt": "a", "tokens": 100000})", {}), ValueError);
  EXPECT_THROW(parse_generate_request(R"({"prompt": "a", "temperature": 0})", {}), ValueError);
  EXPECT_THROW(parse_generate_request(R"({"prompt": 3})", {}), ValueError);
  EXPECT_THROW(parse_generate_request(R"({"inputs": [1]})", {}), ValueError);
}

TEST(ServeRequest, RepliesListTheLabelProbabilitiesAndTopK) {
  const std::vector<float> out{0.1f, 0.7f, 0.2f, 0.5f, 0.25f, 0.25f};
  auto j = nlohmann::json::parse(encode_predictions(out.data(), 2, 3, false, 2));
  ASSERT_EQ(j["outputs"].size(), 2u);
  EXPECT_EQ(j["outputs"][0]["label"], 1);
  EXPECT_EQ(j["outputs"][0]["probabilities"].size(), 3u);
  EXPECT_FLOAT_EQ(j["outputs"][0]["probabilities"][1].get<float>(), 0.7f);
  EXPECT_EQ(j["outputs"][0]["top_k"][1]["label"], 2);
  EXPECT_EQ(j["outputs"][1]["label"], 0);
  EXPECT_EQ(j["outputs"][1]["top_k"][1]["label"], 1);  // ties keep the lower label first
  auto r = nlohmann::json::parse(encode_predictions(out.data(), 2, 1, true, 3));
  EXPECT_FLOAT_EQ(r["outputs"][1]["value"].get<float>(), 0.7f);
  EXPECT_EQ(nlohmann::json::parse(encode_error("bad \xff byte"))["error"].get<std::string>().substr(0, 4), "bad ");
}

TEST(Base64, RoundTripsAndRefusesWhatIsNotBase64) {
  std::string all;
  for (int i = 0; i < 256; ++i) all += static_cast<char>(i);
  for (size_t n : {0, 1, 2, 3, 4, 255, 256}) EXPECT_EQ(base64_decode(base64_encode(all.substr(0, n))), all.substr(0, n));
  EXPECT_EQ(base64_decode("aGk"), "hi");  // padding may be left out
  EXPECT_THROW(base64_decode("a"), ValueError);
  EXPECT_THROW(base64_decode("aGk=a"), ValueError);
  EXPECT_THROW(base64_decode("a=Gk"), ValueError);
  EXPECT_THROW(base64_decode("aG k"), ValueError);
}

}  // namespace
}  // namespace tessera::serve
