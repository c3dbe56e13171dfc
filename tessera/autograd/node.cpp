#include "tessera/autograd/node.h"

#include "tessera/autograd/grad_mode.h"
#include "tessera/ops/ops.h"

namespace tessera::autograd {

namespace {
std::atomic<uint64_t> next_sequence_nr{0};
thread_local bool grad_mode_enabled = true;
}  // namespace

bool grad_enabled() { return grad_mode_enabled; }
void set_grad_enabled(bool enabled) { grad_mode_enabled = enabled; }

Node::Node() : sequence_nr(next_sequence_nr.fetch_add(1, std::memory_order_relaxed)) {}

std::vector<Tensor> FunctionNode::apply(const Tensor& grad_output) {
  if (!fn_)
    throw ValueError("[backward] trying to backward through the graph a second time (at " + name_ +
                     "); its saved tensors were freed. Pass retain_graph=true to the first backward.");
  for (const auto& saved : saved_versions) {
    auto storage = saved.storage.lock();
    if (storage && storage->version() != saved.version)
      throw ValueError(detail::concat("[backward] input ", saved.input, " of ", name_, " (shape ",
                                      shape_str(next_edges[saved.input].input_shape),
                                      ") was modified in place after the forward (version ", saved.version, " -> ",
                                      storage->version(), "), so its gradient would be wrong; e.g. optimizer.step() "
                                      "ran between forward and backward. Clone the tensor before modifying it."));
  }
  return fn_(grad_output);
}

namespace {

// The same elements, laid out the same way, in the same memory.
bool aliases(const Tensor& a, const Tensor& b) {
  return a.shares_storage_with(b) && a.offset() == b.offset() && a.shape() == b.shape() && a.strides() == b.strides();
}

// Whether `g` is the only handle on its memory, so that keeping it cannot alias anything: one Tensor
// (the engine's, passed here) on one TensorImpl that alone holds the Storage, contiguous, whole, with
// no history.
bool owned_only_here(const Tensor& g) {
  const auto& impl = g.impl_ptr();
  return impl.use_count() == 1 && impl->storage.use_count() == 1 && !impl->storage->wraps_external() &&
         !impl->grad_fn && !impl->requires_grad &&
         impl->offset == 0 && g.is_contiguous() &&
         impl->storage->nbytes() == static_cast<size_t>(g.numel()) * dtype_size(g.dtype());
}

// This thread's outermost backward passes, counted; a claim names the pass and the thread.
thread_local uint64_t backward_pass = 0;

bool claimed(const TensorImpl& impl) {
  return impl.grad_buffer_claimer == &backward_pass && impl.grad_buffer_claim_pass == backward_pass;
}

}  // namespace

void begin_outermost_backward() { ++backward_pass; }

Tensor gradient_destination(const Tensor& leaf, const Shape& shape) {
  TensorImpl* impl = leaf.defined() ? leaf.impl() : nullptr;
  if (impl && !impl->grad_fn && impl->requires_grad && !impl->grad && impl->grad_buffer && !claimed(*impl) &&
      impl->grad_buffer->shape == shape && impl->grad_buffer->dtype == DType::Float32) {
    impl->grad_buffer_claimer = &backward_pass;
    impl->grad_buffer_claim_pass = backward_pass;
    return Tensor(impl->grad_buffer);
  }
  return Tensor::empty(shape);
}

std::vector<Tensor> AccumulateGrad::apply(const Tensor& grad_output) {
  auto impl = leaf_.lock();
  if (!impl) return {};
  Tensor leaf(impl);
  {
    NoGradGuard no_grad;
    const bool in_buffer = impl->grad_buffer && aliases(grad_output, Tensor(impl->grad_buffer));
    if (in_buffer) impl->grad_buffer_claimer = nullptr;  // the claimant delivers
    if (!impl->grad && in_buffer) {
      // A linear layer computed the gradient straight into the buffer (gradient_destination).
      impl->grad = impl->grad_buffer;
    } else if (!impl->grad && impl->grad_buffer && !claimed(*impl)) {
      Tensor buffer(impl->grad_buffer);
      copy_(buffer, grad_output);
      impl->grad = impl->grad_buffer;
    } else if (!impl->grad && owned_only_here(grad_output)) {
      // Nothing else can see the incoming gradient (a product's fresh result): keep it as .grad
      // rather than copying it, as PyTorch's AccumulateGrad does.
      impl->grad = grad_output.impl_ptr();
    } else if (!impl->grad) {
      // Own the memory: the incoming gradient may alias another tensor (add passes one buffer to both
      // inputs), and optimizers update .grad in place.
      impl->grad = clone(grad_output).impl_ptr();
    } else {
      Tensor g(impl->grad);
      add_(g, grad_output);
    }
  }
  for (auto& hook : impl->grad_ready_hooks) hook(leaf);
  return {};
}

std::shared_ptr<Node> gradient_edge(const Tensor& t) {
  if (!t.defined()) return nullptr;
  TensorImpl* impl = t.impl();
  if (impl->grad_fn) return impl->grad_fn;
  if (!impl->requires_grad) return nullptr;
  auto acc = impl->grad_accumulator.lock();
  if (!acc) {
    acc = std::make_shared<AccumulateGrad>(t.impl_ptr());
    impl->grad_accumulator = acc;
  }
  return acc;
}

bool needs_grad(std::initializer_list<Tensor> inputs) {
  if (!grad_enabled()) return false;
  for (const auto& t : inputs)
    if (t.defined() && t.requires_grad()) return true;
  return false;
}

static Tensor record_impl(Tensor result, const char* name, const Tensor* inputs, size_t n, BackwardFn backward,
                          Saves saves) {
  if (!grad_enabled()) return result;
  bool any = false;
  for (size_t i = 0; i < n; ++i) any = any || (inputs[i].defined() && inputs[i].requires_grad());
  if (!any) return result;
  auto node = std::make_shared<FunctionNode>(name, std::move(backward));
  node->next_edges.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    node->next_edges.push_back({gradient_edge(inputs[i]), inputs[i].defined() ? inputs[i].shape() : Shape{}});
    if (saves == Saves::Inputs && inputs[i].defined()) {
      const auto& storage = inputs[i].impl()->storage;
      node->saved_versions.push_back({i, storage, storage->version()});
    }
  }
  // A view of an input shares its TensorImpl-free storage only; the result gets fresh autograd state.
  result.impl()->grad_fn = std::move(node);
  result.impl()->requires_grad = true;
  return result;
}

Tensor record(Tensor result, const char* name, std::initializer_list<Tensor> inputs, BackwardFn backward, Saves saves) {
  return record_impl(std::move(result), name, inputs.begin(), inputs.size(), std::move(backward), saves);
}

Tensor record(Tensor result, const char* name, const std::vector<Tensor>& inputs, BackwardFn backward, Saves saves) {
  return record_impl(std::move(result), name, inputs.data(), inputs.size(), std::move(backward), saves);
}

}  // namespace tessera::autograd
