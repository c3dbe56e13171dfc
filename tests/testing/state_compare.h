// Comparing two state dicts (same names in the same order), for the equivalence tests of the
// distributed strategies against single-process training.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "tessera/nn/module.h"

namespace tessera::testing {

// The largest |a - b| over every element of every tensor.
inline double max_state_difference(const nn::StateDict& a, const nn::StateDict& b) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    EXPECT_EQ(a[i].first, b[i].first);
    auto x = a[i].second.to_vector<float>(), y = b[i].second.to_vector<float>();
    EXPECT_EQ(x.size(), y.size()) << a[i].first;
    for (size_t k = 0; k < x.size() && k < y.size(); ++k) worst = std::max(worst, std::fabs(double(x[k]) - y[k]));
  }
  return worst;
}

// The largest ||a - b|| / ||b|| over the tensors; `which` gets that tensor's name.
inline double worst_relative_error(const nn::StateDict& a, const nn::StateDict& b, std::string* which = nullptr) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    EXPECT_EQ(a[i].first, b[i].first);
    auto x = a[i].second.to_vector<float>(), y = b[i].second.to_vector<float>();
    EXPECT_EQ(x.size(), y.size()) << a[i].first;
    double diff = 0, norm = 0;
    for (size_t k = 0; k < x.size() && k < y.size(); ++k) {
      diff += (double(x[k]) - y[k]) * (double(x[k]) - y[k]);
      norm += double(y[k]) * y[k];
    }
    const double e = std::sqrt(diff) / std::max(std::sqrt(norm), 1e-12);
    if (e > worst && which) *which = a[i].first;
    worst = std::max(worst, e);
  }
  return worst;
}

// How many tensors differ in any bit (names, shapes and dtypes must match); for runs that must be
// bitwise reproducible.
inline int count_bitwise_differences(const nn::StateDict& a, const nn::StateDict& b) {
  EXPECT_EQ(a.size(), b.size());
  int differ = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    const Tensor& x = a[i].second;
    const Tensor& y = b[i].second;
    EXPECT_EQ(a[i].first, b[i].first);
    if (x.shape() != y.shape() || x.dtype() != y.dtype()) {
      ADD_FAILURE() << a[i].first << ": shapes or dtypes differ";
      ++differ;
      continue;
    }
    const bool same = x.dtype() == DType::Int64 ? x.to_vector<int64_t>() == y.to_vector<int64_t>() : [&] {
      auto u = x.to_vector<float>(), v = y.to_vector<float>();
      return std::memcmp(u.data(), v.data(), u.size() * sizeof(float)) == 0;
    }();
    if (!same) ++differ;
  }
  return differ;
}

}  // namespace tessera::testing
