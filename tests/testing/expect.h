// Shared test helpers.
#pragma once
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "tessera/core/tensor.h"

namespace tessera::testing {

// Same shape, dtype and bits (views compared by their elements), for results that must be bitwise
// equal.
inline bool bitwise_equal(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  const Tensor x = a.contiguous(), y = b.contiguous();
  return std::memcmp(x.raw_data(), y.raw_data(), x.numel() * dtype_size(x.dtype())) == 0;
}

inline void expect_near(const Tensor& t, const std::vector<float>& expected, float tol = 1e-5f) {
  std::vector<float> v = t.to_vector<float>();
  ASSERT_EQ(v.size(), expected.size()) << t.str();
  for (size_t i = 0; i < v.size(); ++i) EXPECT_NEAR(v[i], expected[i], tol) << "element " << i << " of " << t.str();
}

// Runs `f`, expects an exception of type E whose message contains every fragment.
template <typename E, typename F>
void expect_error(F&& f, std::initializer_list<const char*> fragments) {
  try {
    f();
    ADD_FAILURE() << "expected an exception";
  } catch (const E& e) {
    std::string msg = e.what();
    for (const char* frag : fragments) EXPECT_NE(msg.find(frag), std::string::npos) << "message: " << msg << " lacks: " << frag;
  }
}

}  // namespace tessera::testing
