// Shared test helpers.
#pragma once
#include <gtest/gtest.h>

#include <vector>

#include "tessera/core/tensor.h"

namespace tessera::testing {

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
