#include <gtest/gtest.h>

#include <sstream>

#include "tessera/core/cpu_allocator.h"
#include "tessera/ops/ops.h"
#include "testing/expect.h"

using namespace tessera;
using tessera::testing::expect_error;
using tessera::testing::expect_near;

TEST(Tensor, StorageIsAlignedAndShared) {
  Tensor t = zeros({3, 5});
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.raw_data()) % 64, 0u);
  Tensor v = t.transpose(0, 1);
  EXPECT_TRUE(v.shares_storage_with(t));
  EXPECT_FALSE(v.is_contiguous());
  EXPECT_EQ(v.shape(), (Shape{5, 3}));
  EXPECT_EQ(v.strides(), (Shape{1, 5}));
  v.contiguous();
  Tensor c = v.contiguous();
  EXPECT_TRUE(c.is_contiguous());
  EXPECT_FALSE(c.shares_storage_with(t));
}

TEST(Tensor, ViewsReadTheRightElements) {
  Tensor t = from_vector(std::vector<float>{0, 1, 2, 3, 4, 5}, {2, 3});
  expect_near(t.transpose(0, 1), {0, 3, 1, 4, 2, 5});
  expect_near(t.slice(1, 0, 3, 2), {0, 2, 3, 5});
  expect_near(t.slice(0, -1, 2), {3, 4, 5});
  expect_near(t.reshape({3, 2}), {0, 1, 2, 3, 4, 5});
  expect_near(t.reshape({-1}), {0, 1, 2, 3, 4, 5});
  expect_near(from_vector(std::vector<float>{1, 2}, {2, 1}).expand({2, 3}), {1, 1, 1, 2, 2, 2});
  expect_near(t.permute({1, 0}).reshape({6}), {0, 3, 1, 4, 2, 5});
  EXPECT_EQ(t.unsqueeze(0).shape(), (Shape{1, 2, 3}));
  EXPECT_EQ(t.unsqueeze(-1).shape(), (Shape{2, 3, 1}));
  EXPECT_EQ(t.unsqueeze(0).squeeze(0).shape(), (Shape{2, 3}));
  EXPECT_EQ(zeros({2, 3, 4}).flatten(1).shape(), (Shape{2, 12}));
}

TEST(Tensor, BFloat16RoundTripAndRounding) {
  Tensor t = from_vector(std::vector<float>{1.0f, -2.5f, 3.14159f, 1e-3f, 65504.0f}, {5});
  Tensor b = t.to(DType::BFloat16);
  EXPECT_EQ(b.dtype(), DType::BFloat16);
  EXPECT_EQ(b.numel(), 5);
  std::vector<float> back = b.to(DType::Float32).to_vector<float>();
  EXPECT_EQ(back[0], 1.0f);
  EXPECT_EQ(back[1], -2.5f);
  EXPECT_NEAR(back[2], 3.140625f, 1e-6);  // round to nearest even: 3.14159 -> 3.140625
  EXPECT_NEAR(back[3], 1e-3f, 1e-5);
  // Ties round to even: 1 + 2^-8 lies halfway between 1 and 1 + 2^-7.
  EXPECT_EQ(bf16_to_float(float_to_bf16(1.0f + 1.0f / 256)), 1.0f);
}

TEST(Tensor, SeededRandomIsReproducible) {
  manual_seed(42);
  Tensor a = randn({100});
  manual_seed(42);
  Tensor b = randn({100});
  EXPECT_EQ(a.to_vector<float>(), b.to_vector<float>());
  double mean = 0, var = 0;
  Generator g(3);
  Tensor big = randn({20000}, g);
  for (float x : big.to_vector<float>()) mean += x;
  mean /= 20000;
  for (float x : big.to_vector<float>()) var += (x - mean) * (x - mean);
  EXPECT_NEAR(mean, 0.0, 0.03);
  EXPECT_NEAR(var / 20000, 1.0, 0.05);
  Tensor r = randint(0, 10, {1000}, g);
  for (int64_t v : r.to_vector<int64_t>()) EXPECT_TRUE(v >= 0 && v < 10);
}

TEST(Tensor, Int64AndItem) {
  Tensor i = arange(5);
  EXPECT_EQ(i.dtype(), DType::Int64);
  EXPECT_EQ(i.to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(sum(arange(4, DType::Float32)).item<float>(), 6.0f);
}

// concat appends text and integers directly and streams the rest: the same text a stream writes.
TEST(Errors, ConcatWritesWhatAStreamWould) {
  const char* none = nullptr;
  char mutable_text[] = "buffer";
  std::ostringstream stream;
  stream << "[op] " << int64_t{-7} << ' ' << size_t{18446744073709551615ull} << ' ' << true << ' '
         << std::string("s") << ' ' << std::string_view("v") << ' ' << mutable_text << ' ' << 'c';
  EXPECT_EQ(detail::concat("[op] ", int64_t{-7}, ' ', size_t{18446744073709551615ull}, ' ', true, ' ',
                           std::string("s"), ' ', std::string_view("v"), ' ', mutable_text, ' ', 'c'),
            stream.str());
  EXPECT_EQ(detail::concat("a", none, "b"), "ab");  // a null C string adds nothing
  EXPECT_EQ(detail::concat("x ", 1.5, " ", 3.0f), "x 1.5 3");  // floating point still streams
}

TEST(Errors, NameTheOpAndShapes) {
  expect_error<ValueError>([] { add(zeros({2, 3}), zeros({4})); }, {"[add]", "[2, 3]", "[4]"});
  expect_error<ValueError>([] { matmul(zeros({2, 3}), zeros({4, 5})); }, {"[matmul]", "[2, 3]", "[4, 5]"});
  expect_error<ValueError>([] { linear(zeros({2, 3}), zeros({4, 5})); }, {"[linear]", "[2, 3]", "[4, 5]"});
  expect_error<ValueError>([] { conv2d(zeros({1, 3, 5, 5}), zeros({2, 2, 3, 3})); }, {"[conv2d]", "[2, 2, 3, 3]"});
  expect_error<ValueError>([] { conv2d(zeros({1, 1, 2, 2}), zeros({1, 1, 3, 3})); }, {"[conv2d]", "larger"});
  expect_error<ValueError>([] { zeros({2, 3}).view({4, 2}); }, {"[view]", "[2, 3]", "[4, 2]"});
  expect_error<ValueError>([] { zeros({2, 3}).transpose(0, 1).view({6}); }, {"[view]", "not contiguous"});
  expect_error<ValueError>([] { relu(arange(3)); }, {"[relu]", "float32", "int64"});
  expect_error<ValueError>([] { cross_entropy(zeros({2, 3}), zeros({2})); }, {"[cross_entropy]", "int64"});
  expect_error<IndexError>([] { cross_entropy(zeros({2, 3}), from_vector(std::vector<int64_t>{0, 7}, {2})); },
                           {"[cross_entropy]", "target 7"});
  expect_error<IndexError>([] { embedding(zeros({4, 2}), from_vector(std::vector<int64_t>{4}, {1})); },
                           {"[embedding]", "index 4"});
  expect_error<IndexError>([] { sum(zeros({2, 3}), {2}); }, {"[sum]", "dim 2"});
  expect_error<ValueError>([] { cat({zeros({2, 3}), zeros({2, 4})}, 0); }, {"[cat]", "[2, 4]"});
  expect_error<ValueError>([] { Tensor().shape(); }, {"undefined"});
  expect_error<NotSupportedError>([] { Tensor::empty({2}, DType::Float32, Device{DeviceType::CUDA, 0}); },
                                  {"cuda:0"});
  expect_error<ValueError>([] { layer_norm(zeros({2, 3}), {4}); }, {"[layer_norm]", "[4]", "[2, 3]"});
  expect_error<ValueError>([] { max_pool2d(zeros({2, 3})); }, {"[max_pool2d]", "(N, C, H, W)"});
  expect_error<ValueError>([] { zeros({2, 3}).permute({0}); }, {"[permute]", "[2, 3]"});
  expect_error<ValueError>([] { zeros({2, 3}).expand({4, 4}); }, {"[expand]", "[2, 3]", "[4, 4]"});
  expect_error<ValueError>([] { zeros({2, 3}).reshape({-1, -1}); }, {"[reshape]", "-1"});
  expect_error<ValueError>([] { zeros({2, 3}).reshape({4}); }, {"[reshape]", "[2, 3]", "[4]"});
  expect_error<ValueError>([] { slice(zeros({}), 0, 0, 1); }, {"[slice]", "0-dim"});
  expect_error<IndexError>([] { index_select(zeros({2, 3}), 1, from_vector(std::vector<int64_t>{3}, {1})); },
                           {"[index_select]", "index 3", "size 3"});
  expect_error<ValueError>([] { embedding(zeros({4, 2}), zeros({3})); }, {"[embedding]", "int64"});
  expect_error<ValueError>([] { batch_norm(zeros({2, 3}), Tensor(), Tensor(), ones({4}), Tensor(), true); },
                           {"[batch_norm]", "[4]", "3 channels"});
  expect_error<ValueError>([] { batch_norm(zeros({1, 3}), Tensor(), Tensor(), Tensor(), Tensor(), true); },
                           {"[batch_norm]", "more than one value"});
  expect_error<ValueError>([] { linear(arange(6).reshape({2, 3}), zeros({2, 3})); }, {"[linear]", "int64"});
  expect_error<ValueError>([] {
    Conv2dOptions o;
    o.groups = 2;
    conv2d(zeros({1, 3, 4, 4}), zeros({2, 1, 3, 3}), Tensor(), o);
  }, {"[conv2d]", "groups 2"});
  expect_error<ValueError>([] { softmax(zeros({2, 3}), 2); }, {"[softmax]", "dim 2"});
  expect_error<ValueError>([] { dropout(ones({2}), 1.5f, true); }, {"[dropout]", "1.5"});
  expect_error<ValueError>([] { where(ones({2}), ones({3}), ones({2})); }, {"[where]", "[3]"});
  expect_error<ValueError>([] { mse_loss(ones({2}), ones({3})); }, {"[mse_loss]", "[2]", "[3]"});
  expect_error<ValueError>([] {
    Tensor p = ones({2}).set_requires_grad(true);
    add_(p, ones({2}));
  }, {"[add_]", "requires grad", "NoGradGuard"});
}

TEST(CpuAllocator, ReusesLargeBlocksAndEmptiesCache) {
  cpu_allocator::empty_cache();
  void* first = nullptr;
  {
    Tensor big = zeros({1 << 16});  // 256 KiB
    first = big.raw_data();
  }
#if !defined(__SANITIZE_ADDRESS__)
  EXPECT_GE(cpu_allocator::cached_bytes(), size_t{1} << 18);
  Tensor again = Tensor::empty({1 << 16});
  EXPECT_EQ(again.raw_data(), first);  // the cached block came back
  EXPECT_EQ(reinterpret_cast<uintptr_t>(again.raw_data()) % 64, 0u);
#endif
  cpu_allocator::empty_cache();
  EXPECT_EQ(cpu_allocator::cached_bytes(), 0u);
  static_cast<void>(first);  // read only where the allocator's cache is not AddressSanitizer's
}

namespace tessera {
namespace {

TEST(CpuAllocatorCounters, PeakFollowsLiveTensorBytes) {
  cpu_allocator::reset_peak_allocated_bytes();
  const size_t before = cpu_allocator::allocated_bytes();
  {
    Tensor big = Tensor::empty({1 << 20});  // 4 MiB
    EXPECT_GE(cpu_allocator::allocated_bytes(), before + (4u << 20));
  }
  EXPECT_EQ(cpu_allocator::allocated_bytes(), before);
  EXPECT_GE(cpu_allocator::peak_allocated_bytes(), before + (4u << 20));
  cpu_allocator::reset_peak_allocated_bytes();
  EXPECT_EQ(cpu_allocator::peak_allocated_bytes(), before);
}

}  // namespace
}  // namespace tessera
