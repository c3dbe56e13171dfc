#include "tessera/parallel/zero/sharded_parameters.h"

#include <algorithm>
#include <numeric>
#include <unordered_map>

#include "tessera/autograd/grad_mode.h"
#include "tessera/autograd/node.h"
#include "tessera/nn/char_transformer.h"
#include "tessera/nn/layers.h"
#include "tessera/ops/ops.h"

namespace tessera::parallel::zero {

namespace sharded_planning {

// The model as consecutive layers, where it is one; empty otherwise.
nn::LayerChain chain_of(nn::Module& model) {
  if (auto* t = dynamic_cast<nn::CharTransformer*>(&model)) return t->layer_chain();
  if (auto* s = dynamic_cast<nn::Sequential*>(&model)) return s->layer_chain();
  return {};
}

}  // namespace sharded_planning

std::vector<std::vector<size_t>> ShardedParameters::group_parameters(nn::Module& model, const ZeroUnits& units) {
  std::unordered_map<const TensorImpl*, size_t> index_of;
  for (size_t i = 0; i < units.params.size(); ++i) index_of[units.params[i].second.impl()] = i;
  std::vector<std::vector<size_t>> groups;
  // Segments of the chain: a layer's parameters must be its own (no parameter in two layers, every
  // parameter in one); otherwise the whole model is one unit.
  nn::LayerChain chain = sharded_planning::chain_of(model);
  std::vector<int> seen(units.params.size(), 0);
  bool usable = !chain.empty();
  for (const auto& layer : chain)
    for (const Tensor& p : layer.module->parameters()) {
      auto it = index_of.find(p.impl());
      if (it == index_of.end()) usable = false;
      else ++seen[it->second];
    }
  for (int s : seen) usable = usable && s == 1;
  if (!usable) {
    std::vector<size_t> all(units.params.size());
    std::iota(all.begin(), all.end(), size_t{0});
    groups.push_back(all);
    // The whole model, as one segment of one layer (a non-owning handle: the caller owns the model).
    segments_.push_back({{std::shared_ptr<nn::Module>(&model, [](nn::Module*) {})}, 0});
    return groups;
  }
  Segment current;
  std::vector<size_t> current_group;
  size_t current_bytes = 0;
  auto close = [&] {
    if (current.layers.empty()) return;
    current.unit = current_group.empty() ? -1 : static_cast<int>(groups.size());
    if (!current_group.empty()) groups.push_back(current_group);
    segments_.push_back(std::move(current));
    current = {}, current_group.clear(), current_bytes = 0;
  };
  for (const auto& layer : chain) {
    current.layers.push_back(layer.module);
    for (const Tensor& p : layer.module->parameters()) {
      current_group.push_back(index_of.at(p.impl()));
      current_bytes += static_cast<size_t>(p.numel()) * 4;
    }
    const bool big_enough = wrap_policy_ == "layer" ? !current_group.empty() : current_bytes >= min_unit_bytes_;
    if (big_enough) close();
  }
  if (!current.layers.empty()) {
    // Trailing layers without enough parameters join the last unit (or stand alone without any).
    if (!segments_.empty() && segments_.back().unit >= 0 && !current_group.empty()) {
      Segment& last = segments_.back();
      for (auto& l : current.layers) last.layers.push_back(l);
      auto& g = groups[static_cast<size_t>(last.unit)];
      g.insert(g.end(), current_group.begin(), current_group.end());
      current = {}, current_group.clear();
    } else {
      close();
    }
  }
  return groups;
}

std::vector<size_t> ShardedParameters::gradient_order(size_t unit_count) const {
  std::vector<size_t> order(unit_count);
  std::iota(order.rbegin(), order.rend(), size_t{0});
  return order;
}

Tensor ShardedParameters::keep_chunk(const Tensor& chunk_of_full) const {
  autograd::NoGradGuard no_grad;
  return clone(chunk_of_full);  // apart from the whole buffer, which can then be freed
}

void ShardedParameters::start() {
  gathering_.resize(units_.units.size());
  resident_.assign(units_.units.size(), true);
  release_all();
}

// ---- gathering units ----

void ShardedParameters::start_gather(size_t unit) {
  if (resident_[unit] || gathering_[unit]) return;
  units_.full[unit].impl()->storage->restore_memory();
  gathering_[unit] = units_.group->allgather(units_.shard[unit], units_.full[unit]);
  units_.bytes_communicated += bytes_of(units_.shard[unit]) * (units_.world - 1);
}

void ShardedParameters::ensure_gathered(size_t unit) {
  start_gather(unit);
  if (gathering_[unit]) {
    // No version bump: gathered again before backward, the values are those the forward saved.
    gathering_[unit]->wait();
    gathering_[unit].reset();
  }
  resident_[unit] = true;
}

void ShardedParameters::release(size_t unit) {
  if (held_) return;
  if (gathering_[unit]) {  // a prefetch nobody used: finish it before its buffer goes
    gathering_[unit]->wait();
    gathering_[unit].reset();
  }
  units_.full[unit].impl()->storage->release_memory();
  resident_[unit] = false;
}

void ShardedParameters::gather_all() {
  for (size_t u = 0; u < units_.units.size(); ++u) start_gather(u);
  for (size_t u = 0; u < units_.units.size(); ++u) ensure_gathered(u);
}

void ShardedParameters::release_all() {
  for (size_t u = 0; u < units_.units.size(); ++u) release(u);
}

Tensor ShardedParameters::mark_backward(const Tensor& output, size_t unit) {
  Tensor y;
  {
    autograd::NoGradGuard no_grad;
    y = output.detach();
  }
  std::weak_ptr<ShardedParameters> weak = weak_from_this();
  return autograd::record(y, "ZeroGatherBeforeBackward", {output}, [weak, unit](const Tensor& grad) {
    if (auto z = weak.lock()) z->before_backward_of(unit);
    return std::vector<Tensor>{grad};
  }, autograd::Saves::Nothing);
}

void ShardedParameters::before_backward_of(size_t unit) {
  autograd::NoGradGuard no_grad;
  ensure_gathered(unit);
  if (prefetch_ && unit > 0) start_gather(unit - 1);
}

Tensor ShardedParameters::forward(nn::Module&, const Tensor& input) {
  const bool recording = autograd::grad_enabled();
  // The last unit stays gathered after a recorded forward: its backward comes first.
  int last_unit = -1;
  for (const auto& s : segments_) last_unit = std::max(last_unit, s.unit);
  Tensor h = input;
  for (const Segment& segment : segments_) {
    if (segment.unit >= 0) {
      const auto u = static_cast<size_t>(segment.unit);
      {
        autograd::NoGradGuard no_grad;
        ensure_gathered(u);
        if (prefetch_ && u + 1 < units_.units.size()) start_gather(u + 1);
      }
      for (const auto& layer : segment.layers) h = layer->forward(h);
      if (recording && h.requires_grad()) {
        h = mark_backward(h, u);
        if (segment.unit != last_unit) release(u);
      } else {
        release(u);
      }
    } else {
      for (const auto& layer : segment.layers) h = layer->forward(h);
    }
  }
  return h;
}

void ShardedParameters::publish() {
  // A unit still gathered (a forward without backward, or held) holds the old values: gathered
  // again, it takes the new chunks.
  autograd::NoGradGuard no_grad;
  const bool held = held_;
  held_ = false;
  release_all();
  if (held) hold_gathered(true);
}

void ShardedParameters::before_whole_written() {
  for (auto& f : units_.full) f.impl()->storage->restore_memory();
}

void ShardedParameters::after_whole_written() {
  autograd::NoGradGuard no_grad;
  for (size_t u = 0; u < units_.units.size(); ++u) {
    copy_(units_.shard[u], units_.chunk_of_full(u));
    resident_[u] = true;
  }
  release_all();
}

void ShardedParameters::hold_gathered(bool on) {
  if (on == held_) return;
  if (on) {
    gather_all();
    held_ = true;
  } else {
    held_ = false;
    release_all();
  }
}

}  // namespace tessera::parallel::zero
