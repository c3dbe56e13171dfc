#include "tessera/nn/checkpoint.h"

#include "tessera/autograd/engine.h"
#include "tessera/autograd/grad_mode.h"
#include "tessera/autograd/node.h"
#include "tessera/core/rng.h"

namespace tessera::nn {

namespace {

// Runs fn with the default generator at `state`, then puts the generator back where it was.
Tensor replay(const std::function<Tensor(const Tensor&)>& fn, const Tensor& x, const Generator& state) {
  Generator now = default_generator();
  default_generator() = state;
  Tensor y;
  try {
    y = fn(x);
  } catch (...) {
    default_generator() = now;
    throw;
  }
  default_generator() = now;
  return y;
}

}  // namespace

Tensor checkpoint(const std::function<Tensor(const Tensor&)>& fn, const Tensor& x,
                  const std::vector<Tensor>& parameters) {
  std::vector<Tensor> inputs{x};
  inputs.insert(inputs.end(), parameters.begin(), parameters.end());
  bool needed = autograd::grad_enabled() && x.requires_grad();
  for (const Tensor& p : parameters) needed = needed || (autograd::grad_enabled() && p.requires_grad());
  if (!needed) return fn(x);
  const Generator rng = default_generator();
  Tensor y;
  {
    autograd::NoGradGuard no_grad;
    y = fn(x);
  }
  const size_t count = inputs.size();
  return autograd::record(y, "CheckpointBackward", inputs, [fn, x, rng, count](const Tensor& grad) {
    Tensor input = x.detach();
    input.set_requires_grad(x.requires_grad());
    Tensor output;
    const bool was_enabled = autograd::grad_enabled();
    autograd::set_grad_enabled(true);  // the engine runs nodes under no-grad; the recompute records
    try {
      output = replay(fn, input, rng);
    } catch (...) {
      autograd::set_grad_enabled(was_enabled);
      throw;
    }
    autograd::set_grad_enabled(was_enabled);
    // The parameters' gradients accumulate here, through their own AccumulateGrad nodes.
    if (output.requires_grad()) autograd::backward_within_pass({output}, {grad});
    std::vector<Tensor> grads(count);
    if (x.requires_grad()) grads[0] = input.grad();
    return grads;
  }, autograd::Saves::Nothing);
}

}  // namespace tessera::nn
