// Finite-difference gradient check, shipped in the library so users can check their own ops.
// Compares the analytic gradient of L = sum(f(inputs) * R), R a fixed random projection, with central
// differences. float32 only: the loss is summed in double and eps is large enough (1e-2 by default)
// that rounding error stays near 1e-5 while truncation error is O(eps²).
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "tessera/core/tensor.h"

namespace tessera::autograd {

struct GradcheckOptions {
  double eps = 1e-2;
  double atol = 2e-3;
  double rtol = 2e-2;
  uint64_t seed = 1234;
};

struct GradcheckResult {
  bool ok = true;
  std::string message;  // the first mismatch: input, element, analytic and numeric values
  double max_abs_error = 0.0;
};

// `inputs` are leaves; each float32 one is checked (its requires_grad is set for the call).
GradcheckResult gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& f, std::vector<Tensor> inputs,
                          const GradcheckOptions& options = {});

}  // namespace tessera::autograd
