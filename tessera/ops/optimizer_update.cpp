// The fused optimizer updates: checked here (one device, one shape, contiguous float32), computed by
// the kernel of the parameter's device. No autograd: an update is not differentiated, and it bumps
// the parameter's version so that a graph that saved the old value says so at backward.
#include "tessera/ops/detail.h"
#include "tessera/ops/kernels.h"

namespace tessera {

namespace {

void check_update_operand(const Tensor& param, const Tensor& t, const char* op, const char* arg) {
  detail::check_float(t, op, arg);
  TESSERA_CHECK(t.is_contiguous(), "[", op, "] ", arg, " must be contiguous (shape ", shape_str(t.shape()), ")");
  TESSERA_CHECK(t.shape() == param.shape(), "[", op, "] ", arg, " has shape ", shape_str(t.shape()),
                " but the parameter has ", shape_str(param.shape()));
  detail::check_same_device(param, t, op);
}

// Every operand defined (a buffer only where `required`), contiguous float32, shaped and placed as param.
void check_operands(const Tensor& param, std::initializer_list<std::pair<const Tensor*, const char*>> required,
                    std::initializer_list<std::pair<const Tensor*, const char*>> optional, const char* op) {
  check_update_operand(param, param, op, "param");
  for (const auto& [t, name] : required) check_update_operand(param, *t, op, name);
  for (const auto& [t, name] : optional)
    if (t->defined()) check_update_operand(param, *t, op, name);
}

void mark_modified(const Tensor& param) { param.impl()->storage->bump_version(); }

}  // namespace

void sgd_update_(Tensor& param, const Tensor& grad, Tensor& momentum_buffer, const SgdStep& step) {
  check_operands(param, {{&grad, "grad"}}, {{&momentum_buffer, "momentum_buffer"}}, "sgd_update_");
  mark_modified(param);
  kernels_for(param).sgd_update(param, grad, momentum_buffer, step);
}

void adam_update_(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq, const AdamStep& step) {
  check_operands(param, {{&grad, "grad"}, {&exp_avg, "exp_avg"}, {&exp_avg_sq, "exp_avg_sq"}}, {}, "adam_update_");
  mark_modified(param);
  kernels_for(param).adam_update(param, grad, exp_avg, exp_avg_sq, step);
}

std::pair<double, double> lamb_moments_(const Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq,
                                        const LambStep& step) {
  check_operands(param, {{&grad, "grad"}, {&exp_avg, "exp_avg"}, {&exp_avg_sq, "exp_avg_sq"}}, {}, "lamb_moments_");
  return kernels_for(param).lamb_moments(param, grad, exp_avg, exp_avg_sq, step);
}

void lamb_apply_(Tensor& param, const Tensor& exp_avg, const Tensor& exp_avg_sq, const LambStep& step,
                 float scaled_lr) {
  check_operands(param, {{&exp_avg, "exp_avg"}, {&exp_avg_sq, "exp_avg_sq"}}, {}, "lamb_apply_");
  mark_modified(param);
  kernels_for(param).lamb_apply(param, exp_avg, exp_avg_sq, step, scaled_lr);
}

void lars_update_(Tensor& param, const Tensor& grad, Tensor& momentum_buffer, float local_lr, float weight_decay,
                  float momentum) {
  check_operands(param, {{&grad, "grad"}}, {{&momentum_buffer, "momentum_buffer"}}, "lars_update_");
  mark_modified(param);
  kernels_for(param).lars_update(param, grad, momentum_buffer, local_lr, weight_decay, momentum);
}

double squared_norm(const Tensor& t) {
  detail::check_float(t, "squared_norm", "t");
  return kernels_for(t).squared_norm(t);
}

}  // namespace tessera
