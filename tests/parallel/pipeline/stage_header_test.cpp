// The header between pipeline stages (stage_header.h): every tensor a stage sends reads back as
// itself, and what a corrupt or hostile peer could send is refused before anything is allocated.
#include <gtest/gtest.h>

#include <limits>

#include "tessera/core/error.h"
#include "tessera/parallel/pipeline/stage_header.h"

namespace tessera::parallel::pipeline {
namespace {

TEST(StageHeader, EveryShapeAndDtypeReadsBackAsItself) {
  for (DType dtype : {DType::Float32, DType::Int64, DType::BFloat16})
    for (const Shape& shape : {Shape{}, Shape{0}, Shape{7}, Shape{4, 64, 128}, Shape{1, 2, 3, 4, 5, 6, 7, 8}, Shape{3, 0, 5}}) {
      const StageTensorSpec spec = decode_stage_header(encode_stage_header(shape, dtype), "test");
      EXPECT_EQ(spec.shape, shape);
      EXPECT_EQ(spec.dtype, dtype);
    }
}

TEST(StageHeader, WhatCannotBeSentIsRefusedAtTheSender) {
  EXPECT_THROW(encode_stage_header({2, 2}, DType::Float16), ValueError);
  EXPECT_THROW(encode_stage_header(Shape(9, 1), DType::Float32), ValueError);
}

TEST(StageHeader, MalformedOrAbsurdHeadersAreRefusedNamingTheContext) {
  auto refused = [](StageHeader h) {
    try {
      decode_stage_header(h, "[pipeline] stage 1 receiving activations from stage 0");
    } catch (const ValueError& e) {
      return std::string(e.what()).find("stage 1 receiving activations from stage 0") != std::string::npos;
    }
    return false;
  };
  const int64_t big = std::numeric_limits<int64_t>::max();
  EXPECT_TRUE(refused({3, 1, 4}));                       // unknown dtype code
  EXPECT_TRUE(refused({-1, 1, 4}));
  EXPECT_TRUE(refused({0, -1}));                         // negative rank
  EXPECT_TRUE(refused({0, 9}));                          // rank past 8
  EXPECT_TRUE(refused({0, 2, 3, -4}));                   // negative size
  EXPECT_TRUE(refused({0, 1, 3, 5}));                    // a size past the rank
  EXPECT_TRUE(refused({0, 1, int64_t{1} << 33}));        // 32 GiB of float32: over the bound
  EXPECT_TRUE(refused({1, 2, int64_t{1} << 31, int64_t{1} << 31}));  // 2^62 elements
  EXPECT_TRUE(refused({0, 8, big, big, big, big, big, big, big, big}));  // would overflow int64
  // At the bound exactly: 16 GiB of float32 is announced, not refused (the allocator decides).
  EXPECT_FALSE(refused({0, 2, int64_t{1} << 16, int64_t{1} << 16}));
  // An empty tensor is no payload whatever its other sizes.
  EXPECT_FALSE(refused({0, 3, big, 0, big}));
}

}  // namespace
}  // namespace tessera::parallel::pipeline
