// The define-by-run tape: each recorded op result points (grad_fn) to a Node that knows how to turn the
// gradient of its output into gradients of its inputs, and where those go (next edges). Leaves that
// require grad end in an AccumulateGrad node, shared by all uses of the leaf within a graph, so the
// engine runs it exactly once, when the leaf's gradient is final.
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tessera/core/tensor.h"

namespace tessera::autograd {

class Node {
 public:
  Node();
  virtual ~Node() = default;
  // Gradients with respect to each input, in input order; an undefined tensor means "no gradient".
  virtual std::vector<Tensor> apply(const Tensor& grad_output) = 0;
  virtual std::string name() const = 0;
  // Frees what the backward needed (saved tensors) once the graph has been run without retain_graph.
  virtual void release() {}

  struct Edge {
    std::shared_ptr<Node> node;  // null: this input needs no gradient
    Shape input_shape;           // checked against the gradient the node produces
  };
  std::vector<Edge> next_edges;
  // Creation order. The engine runs ready nodes newest first, which gives parameter gradients in
  // reverse order of use — the order DDP's buckets expect.
  uint64_t sequence_nr;
};

using BackwardFn = std::function<std::vector<Tensor>(const Tensor& grad_output)>;

// A node whose backward is a closure over what the op saved.
class FunctionNode final : public Node {
 public:
  FunctionNode(std::string name, BackwardFn fn) : name_(std::move(name)), fn_(std::move(fn)) {}
  std::vector<Tensor> apply(const Tensor& grad_output) override;
  std::string name() const override { return name_; }
  void release() override { fn_ = nullptr; }
  // Inputs whose values the backward reads, with their storage version at the forward.
  struct SavedVersion {
    size_t input;
    std::weak_ptr<Storage> storage;
    uint64_t version;
  };
  std::vector<SavedVersion> saved_versions;

 private:
  std::string name_;
  BackwardFn fn_;
};

// Whether an op's backward reads its inputs' values (then modifying one in place between forward and
// backward is an error) or not (add, views, ... only need shapes).
enum class Saves { Inputs, Nothing };

// Adds the incoming gradient to the leaf's .grad, then runs its grad-ready hooks.
class AccumulateGrad final : public Node {
 public:
  explicit AccumulateGrad(std::weak_ptr<TensorImpl> leaf) : leaf_(std::move(leaf)) {}
  std::vector<Tensor> apply(const Tensor& grad_output) override;
  std::string name() const override { return "AccumulateGrad"; }

 private:
  std::weak_ptr<TensorImpl> leaf_;
};

// Where a backward op that computes a leaf's whole gradient afresh (linear's weight product) should
// write it: the leaf's gradient buffer (Tensor::set_grad_buffer) when AccumulateGrad would copy the
// gradient into it anyway (a leaf without .grad, and no other use of it in this backward has claimed
// the buffer: a weight used twice gets a fresh tensor for its second use), else a new tensor of
// `shape`. AccumulateGrad then finds the gradient in place: DDP's bucket slot or the parameter
// server's segment is written once, by the product itself.
// A claim lasts until the claimant delivers the gradient to AccumulateGrad; a gradient that arrives
// meanwhile from elsewhere (a nested backward, as nn::checkpoint runs) goes to a fresh .grad and the
// claimant's is added to it. A claim left by a pass that failed lapses when the thread's next
// outermost backward begins (begin_outermost_backward).
Tensor gradient_destination(const Tensor& leaf, const Shape& shape);
// Called by autograd::backward when no other backward runs on this thread.
void begin_outermost_backward();

// The edge through which a gradient for `t` should flow (null when t needs none).
std::shared_ptr<Node> gradient_edge(const Tensor& t);

// Records `result` as the output of an op with the given inputs, if grad mode is on and any input
// requires grad. `backward` receives the output gradient and returns one gradient per input.
// Returns `result` for chaining.
Tensor record(Tensor result, const char* name, std::initializer_list<Tensor> inputs, BackwardFn backward,
              Saves saves = Saves::Inputs);
Tensor record(Tensor result, const char* name, const std::vector<Tensor>& inputs, BackwardFn backward,
              Saves saves = Saves::Inputs);
// True when an op on these inputs would be recorded.
bool needs_grad(std::initializer_list<Tensor> inputs);

}  // namespace tessera::autograd
