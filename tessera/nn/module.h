// Module: named parameters, buffers and children, train/eval, and a state_dict whose keys are the
// dotted paths PyTorch would use ("0.weight", "attn.qkv.bias"), so checkpoints interoperate.
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tessera/core/tensor.h"

namespace tessera::nn {

// Ordered (name, tensor) pairs: registration order is the order DDP buckets and checkpoints use.
using StateDict = std::vector<std::pair<std::string, Tensor>>;

class Module {
 public:
  virtual ~Module() = default;
  // Modules with one input and one output override this; containers call it.
  virtual Tensor forward(const Tensor& input);
  Tensor operator()(const Tensor& input) { return forward(input); }
  virtual std::string name() const { return "Module"; }

  StateDict named_parameters(bool recurse = true) const;
  std::vector<Tensor> parameters(bool recurse = true) const;
  StateDict named_buffers(bool recurse = true) const;
  const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& children() const { return children_; }
  // Puts `module` in place of the child registered as `name` (same position, so state_dict order is
  // kept) and returns the old child. For module surgery such as parallel::convert_sync_batchnorm; a
  // parent whose forward calls the child through its own typed member still calls the old one.
  std::shared_ptr<Module> replace_child(const std::string& name, std::shared_ptr<Module> module);
  int64_t num_parameters() const;

  virtual void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }
  // Moves every parameter and buffer to `device` in place: the handles stay valid (an optimizer or a
  // tied weight still sees the same tensor), their values now there; gradients are dropped.
  void to(Device device);
  // set_to_none (the default, as PyTorch 2) drops .grad; otherwise zeroes it in place.
  void zero_grad(bool set_to_none = true);

  // Parameters then buffers, with dotted names.
  StateDict state_dict() const;
  // Copies values in place (parameter handles stay valid). strict: every key must be present and
  // known; a shape or dtype mismatch is always an error naming the key and both shapes.
  void load_state_dict(const StateDict& state, bool strict = true);

 protected:
  Tensor register_parameter(const std::string& name, Tensor value, bool requires_grad = true);
  Tensor register_buffer(const std::string& name, Tensor value);
  template <typename M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> module) {
    children_.emplace_back(name, module);
    return module;
  }
  // Register, or put in place of the entry already registered under `name` (same position): what
  // Python's attribute assignment does (`self.fc = nn.Linear(...)`, `self.w = nn.Parameter(...)`).
  void set_parameter(const std::string& name, Tensor value);
  void set_buffer(const std::string& name, Tensor value);
  void set_child(const std::string& name, std::shared_ptr<Module> module);

 private:
  void collect(const std::string& prefix, bool params, bool recurse, StateDict& out) const;
  StateDict parameters_;
  StateDict buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  bool training_ = true;
};

using ModulePtr = std::shared_ptr<Module>;

// One layer of a model written as a chain (output of one is the input of the next), with the prefix
// its parameters carry in the whole model's state_dict ("h.3."). Pipeline parallelism cuts such a
// chain into stages, and the prefixes keep a stage's checkpoint names equal to the whole model's.
struct NamedLayer {
  std::string prefix;
  std::shared_ptr<Module> module;
};
using LayerChain = std::vector<NamedLayer>;

// Drops (set_to_none) or zeroes the .grad of each tensor; Module and Optimizer zero_grad call it.
void zero_grad(const std::vector<Tensor>& params, bool set_to_none = true);
// A copy of every tensor of `state` in host memory, detached (what a save writes while training goes
// on updating the originals in place).
StateDict host_copy(const StateDict& state);

}  // namespace tessera::nn
