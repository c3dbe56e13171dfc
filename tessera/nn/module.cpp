#include "tessera/nn/module.h"

#include <unordered_map>
#include <unordered_set>

#include "tessera/autograd/grad_mode.h"
#include "tessera/ops/ops.h"

namespace tessera::nn {

Tensor Module::forward(const Tensor&) {
  throw NotSupportedError("[" + name() + "::forward] this module does not take a single tensor input");
}

Tensor Module::register_parameter(const std::string& name, Tensor value, bool requires_grad) {
  TESSERA_CHECK(name.find('.') == std::string::npos, "[register_parameter] name '", name, "' must not contain '.'");
  value.set_requires_grad(requires_grad);
  parameters_.emplace_back(name, value);
  return value;
}

Tensor Module::register_buffer(const std::string& name, Tensor value) {
  TESSERA_CHECK(name.find('.') == std::string::npos, "[register_buffer] name '", name, "' must not contain '.'");
  buffers_.emplace_back(name, value);
  return value;
}

namespace {
template <typename Value>
bool replace_entry(std::vector<std::pair<std::string, Value>>& entries, const std::string& name, Value value) {
  for (auto& [n, v] : entries)
    if (n == name) {
      v = std::move(value);
      return true;
    }
  return false;
}
}  // namespace

void Module::set_parameter(const std::string& name, Tensor value) {
  TESSERA_CHECK(value.defined(), "[set_parameter] parameter '", name, "' of ", this->name(), " is undefined");
  value.set_requires_grad(true);
  if (!replace_entry(parameters_, name, value)) register_parameter(name, value);
}

void Module::set_buffer(const std::string& name, Tensor value) {
  TESSERA_CHECK(value.defined(), "[set_buffer] buffer '", name, "' of ", this->name(), " is undefined");
  if (!replace_entry(buffers_, name, value)) register_buffer(name, value);
}

void Module::set_child(const std::string& name, std::shared_ptr<Module> module) {
  TESSERA_CHECK(module != nullptr, "[set_child] child '", name, "' of ", this->name(), " is null");
  TESSERA_CHECK(name.find('.') == std::string::npos, "[set_child] name '", name, "' must not contain '.'");
  if (!replace_entry(children_, name, module)) children_.emplace_back(name, module);
}

void Module::collect(const std::string& prefix, bool params, bool recurse, StateDict& out) const {
  for (const auto& [n, t] : params ? parameters_ : buffers_) out.emplace_back(prefix + n, t);
  if (!recurse) return;
  for (const auto& [n, child] : children_) child->collect(prefix + n + ".", params, true, out);
}

std::shared_ptr<Module> Module::replace_child(const std::string& name, std::shared_ptr<Module> module) {
  TESSERA_CHECK(module != nullptr, "[replace_child] cannot put a null module in place of '", name, "' in ", this->name());
  for (auto& [n, child] : children_)
    if (n == name) return std::exchange(child, std::move(module));
  std::string known;
  for (auto& [n, child] : children_) known += (known.empty() ? "" : ", ") + n;
  throw ValueError("[replace_child] " + this->name() + " has no child '" + name + "' (children: " +
                   (known.empty() ? "none" : known) + ")");
}

StateDict Module::named_parameters(bool recurse) const {
  StateDict out;
  collect("", true, recurse, out);
  return out;
}

std::vector<Tensor> Module::parameters(bool recurse) const {
  std::vector<Tensor> out;
  for (auto& [n, t] : named_parameters(recurse)) out.push_back(t);
  return out;
}

StateDict Module::named_buffers(bool recurse) const {
  StateDict out;
  collect("", false, recurse, out);
  return out;
}

int64_t Module::num_parameters() const {
  int64_t n = 0;
  for (auto& [name, t] : named_parameters()) n += t.numel();
  return n;
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [n, child] : children_) child->train(on);
}

void Module::zero_grad(bool set_to_none) { nn::zero_grad(parameters(), set_to_none); }

StateDict host_copy(const StateDict& state) {
  NoGradGuard no_grad;
  StateDict out;
  out.reserve(state.size());
  for (const auto& [name, t] : state) out.emplace_back(name, t.device().is_cpu() ? clone(t.detach()) : t.detach().cpu());
  return out;
}

void zero_grad(const std::vector<Tensor>& params, bool set_to_none) {
  for (const auto& p : params) {
    if (set_to_none || !p.grad().defined()) {
      p.set_grad(Tensor());
    } else {
      Tensor g = p.grad();
      fill_(g, 0.0f);
    }
  }
}

StateDict Module::state_dict() const {
  StateDict out = named_parameters();
  for (auto& kv : named_buffers()) out.push_back(kv);
  return out;
}

void Module::to(Device device) {
  NoGradGuard no_grad;
  for (auto& [name, t] : state_dict()) {
    if (t.device() == device) continue;  // a tied weight seen the second time
    const Tensor moved = t.to(device);  // contiguous there
    TensorImpl& impl = *t.impl();
    impl.storage = moved.impl()->storage;
    impl.offset = moved.impl()->offset;
    impl.strides = moved.impl()->strides;
    impl.grad.reset();
  }
}

void Module::load_state_dict(const StateDict& state, bool strict) {
  std::unordered_map<std::string, const Tensor*> given;
  for (const auto& [n, t] : state) given[n] = &t;
  StateDict own = state_dict();
  std::vector<std::string> missing;
  std::unordered_set<std::string> known;
  for (const auto& [n, t] : own) {
    known.insert(n);
    auto it = given.find(n);
    if (it == given.end()) {
      missing.push_back(n);
      continue;
    }
    const Tensor& src = *it->second;
    TESSERA_CHECK(src.shape() == t.shape(), "[load_state_dict] shape mismatch for '", n, "': checkpoint has ",
                  shape_str(src.shape()), ", model has ", shape_str(t.shape()));
    const bool half_into_float = (src.dtype() == DType::BFloat16 || src.dtype() == DType::Float16) &&
                                 t.dtype() == DType::Float32;  // a bf16 or fp16 export loads into float32
    TESSERA_CHECK(src.dtype() == t.dtype() || half_into_float,
                  "[load_state_dict] dtype mismatch for '", n, "': checkpoint has ", dtype_name(src.dtype()),
                  ", model has ", dtype_name(t.dtype()));
  }
  std::vector<std::string> unexpected;
  for (const auto& [n, t] : state)
    if (!known.count(n)) unexpected.push_back(n);
  if (strict && (!missing.empty() || !unexpected.empty())) {
    std::string msg = "[load_state_dict] state does not match the model.";
    auto list = [](const std::vector<std::string>& v) {
      std::string s;
      for (size_t i = 0; i < v.size() && i < 10; ++i) s += (i ? ", " : " ") + v[i];
      if (v.size() > 10) s += ", ... (" + std::to_string(v.size()) + " in all)";
      return s;
    };
    if (!missing.empty()) msg += " Missing keys:" + list(missing) + ".";
    if (!unexpected.empty()) msg += " Unexpected keys:" + list(unexpected) + ".";
    throw ValueError(msg + " Pass strict=false to load the keys that match.");
  }
  NoGradGuard no_grad;
  for (auto& [n, t] : own) {
    auto it = given.find(n);
    if (it == given.end()) continue;
    Tensor dst = t;
    copy_(dst, *it->second);
  }
}

}  // namespace tessera::nn
