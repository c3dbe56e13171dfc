#include "tessera/autograd/engine.h"

#include <queue>
#include <unordered_map>

#include "tessera/autograd/grad_mode.h"
#include "tessera/autograd/node.h"
#include "tessera/ops/ops.h"

namespace tessera::autograd {

namespace {

struct NewestFirst {
  bool operator()(const Node* a, const Node* b) const { return a->sequence_nr < b->sequence_nr; }
};

// Number of edges into each node reachable from the roots.
std::unordered_map<Node*, int> count_dependencies(const std::vector<Node*>& roots) {
  std::unordered_map<Node*, int> deps;
  std::vector<Node*> stack = roots;
  std::unordered_map<Node*, bool> seen;
  for (Node* r : roots) seen[r] = true;
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (auto& e : n->next_edges) {
      if (!e.node) continue;
      Node* next = e.node.get();
      ++deps[next];
      if (!seen[next]) {
        seen[next] = true;
        stack.push_back(next);
      }
    }
  }
  return deps;
}

// The callbacks of the backward pass running on this thread (null outside backward).
thread_local std::vector<std::function<void()>>* current_callbacks = nullptr;

// Installs a callback list for one backward pass; restores the outer one (a backward run from a
// callback or hook) when done.
class CallbackScope {
 public:
  CallbackScope() : outer_(current_callbacks) { current_callbacks = &callbacks_; }
  ~CallbackScope() { current_callbacks = outer_; }
  // Runs the callbacks queued so far and any they queue.
  void run() {
    for (size_t i = 0; i < callbacks_.size(); ++i) {
      auto callback = std::move(callbacks_[i]);
      callback();
    }
    callbacks_.clear();
  }

 private:
  std::vector<std::function<void()>> callbacks_;
  std::vector<std::function<void()>>* outer_;
};

void run_graph(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads, bool retain_graph);

}  // namespace

void queue_callback(std::function<void()> callback) {
  TESSERA_CHECK(current_callbacks != nullptr, "[queue_callback] called outside a backward pass");
  current_callbacks->push_back(std::move(callback));
}

void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads, bool retain_graph) {
  if (current_callbacks == nullptr) begin_outermost_backward();
  CallbackScope scope;
  run_graph(roots, grads, retain_graph);
  scope.run();
}

void backward_within_pass(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads) {
  if (current_callbacks == nullptr) return backward(roots, grads, false);
  run_graph(roots, grads, false);
}

namespace {

void run_graph(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads, bool retain_graph) {
  TESSERA_CHECK(roots.size() == grads.size(), "[backward] got ", roots.size(), " roots but ", grads.size(),
                " gradients");
  NoGradGuard no_grad;  // backward formulas themselves are not recorded
  std::unordered_map<Node*, Tensor> pending;  // summed incoming gradient per node
  std::vector<std::shared_ptr<Node>> root_nodes;
  for (size_t i = 0; i < roots.size(); ++i) {
    const Tensor& root = roots[i];
    TESSERA_CHECK(root.requires_grad(), "[backward] tensor ", shape_str(root.shape()),
                  " does not require grad and has no grad_fn");
    Tensor g = grads[i];
    if (!g.defined()) {
      TESSERA_CHECK(root.numel() == 1, "[backward] a gradient must be given for a non-scalar root of shape ",
                    shape_str(root.shape()));
      g = ones_like(root);
    }
    TESSERA_CHECK(g.shape() == root.shape(), "[backward] gradient shape ", shape_str(g.shape()),
                  " does not match root shape ", shape_str(root.shape()));
    auto node = gradient_edge(root);
    auto& slot = pending[node.get()];
    slot = slot.defined() ? add(slot, g) : g;
    root_nodes.push_back(node);
  }
  std::vector<Node*> raw_roots;
  for (auto& n : root_nodes) raw_roots.push_back(n.get());
  auto deps = count_dependencies(raw_roots);

  std::priority_queue<Node*, std::vector<Node*>, NewestFirst> ready;
  for (Node* r : raw_roots)
    if (deps[r] == 0) {
      ready.push(r);
      deps[r] = -1;  // queued
    }
  while (!ready.empty()) {
    Node* node = ready.top();
    ready.pop();
    Tensor grad_out = std::move(pending[node]);
    pending.erase(node);
    std::vector<Tensor> grad_inputs = node->apply(grad_out);
    if (!retain_graph) node->release();
    for (size_t i = 0; i < node->next_edges.size(); ++i) {
      auto& edge = node->next_edges[i];
      if (!edge.node) continue;
      Node* next = edge.node.get();
      if (i < grad_inputs.size() && grad_inputs[i].defined()) {
        const Tensor& gi = grad_inputs[i];
        TESSERA_ASSERT(gi.shape() == edge.input_shape, "backward of ", node->name(), " produced gradient ",
                       shape_str(gi.shape()), " for input ", i, " of shape ", shape_str(edge.input_shape));
        auto& slot = pending[next];
        slot = slot.defined() ? add(slot, gi) : gi;
      }
      if (--deps[next] == 0) {
        if (pending.count(next) && pending[next].defined()) {
          ready.push(next);
        } else {
          // No gradient reached this node (all contributions undefined): skip it but release its
          // dependants so the walk still terminates.
          pending.erase(next);
          std::vector<Node*> skip{next};
          while (!skip.empty()) {
            Node* s = skip.back();
            skip.pop_back();
            if (!retain_graph) s->release();
            for (auto& e : s->next_edges)
              if (e.node && --deps[e.node.get()] == 0) {
                if (pending.count(e.node.get()) && pending[e.node.get()].defined()) ready.push(e.node.get());
                else skip.push_back(e.node.get());
              }
          }
        }
      }
    }
  }
}

}  // namespace

}  // namespace tessera::autograd
