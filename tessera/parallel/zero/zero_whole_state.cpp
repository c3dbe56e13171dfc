#include <map>
#include <set>

#include "tessera/autograd/grad_mode.h"
#include "tessera/ops/ops.h"
#include "tessera/parallel/zero/zero_data_parallel_impl.h"

namespace tessera::parallel::zero {

// The whole model's and optimizer's state: gathered from every rank's pieces, and cut back into them
// (at any world size: the pieces follow from the units, flat_unit.h).

nn::StateDict ZeroDataParallel::Impl::full_state_dict() {
  autograd::NoGradGuard no_grad;
  layout_->gather_whole();
  nn::StateDict out;
  for (const auto& [name, t] : model_->state_dict()) out.emplace_back(name, clone(t));
  layout_->release_whole();
  return out;
}

void ZeroDataParallel::Impl::load_full_state_dict(const nn::StateDict& state) {
  autograd::NoGradGuard no_grad;
  layout_->before_whole_written();
  model_->load_state_dict(state, true);
  for (auto& f : z_.full) f.impl()->storage->bump_version();
  layout_->after_whole_written();
}

Tensor ZeroDataParallel::Impl::gather_chunks(const Tensor& chunk, size_t unit) {
  Tensor whole = Tensor::empty({z_.units[unit].padded()});
  z_.group->allgather(chunk, whole)->wait();
  return whole;
}

nn::StateDict ZeroDataParallel::Impl::full_optimizer_state(const optim::Optimizer& optimizer) {
  autograd::NoGradGuard no_grad;
  nn::StateDict mine = optimizer.state_dict(), out;
  // This rank's buffers per parameter, by name.
  std::vector<std::map<std::string, Tensor>> buffers(z_.params.size());
  std::set<std::string> names;
  for (const auto& [key, t] : mine) {
    if (key == "step" || key == "lr") {
      out.emplace_back(key, t);
      continue;
    }
    const size_t dot = key.find('.');
    buffers[std::stoul(key.substr(0, dot))][key.substr(dot + 1)] = t;
    names.insert(key.substr(dot + 1));
  }
  // Each rank has a buffer for every piece (every piece gets a gradient), so the names agree.
  std::vector<std::map<std::string, Tensor>> whole(z_.params.size());
  for (size_t u = 0; u < z_.units.size(); ++u) {
    const FlatUnit& unit = z_.units[u];
    for (const std::string& name : names) {
      Tensor chunk = zeros({unit.chunk});
      for (size_t k = 0; k < unit.params.size(); ++k) {
        const Piece piece = piece_of(unit, k, z_.rank);
        auto it = buffers[unit.params[k]].find(name);
        TESSERA_CHECK(it != buffers[unit.params[k]].end(), "[zero] rank ", z_.rank, ": the optimizer has no '", name,
                      "' for parameter ", z_.params[unit.params[k]].first, " although it has one for others");
        Tensor dst = chunk.slice(0, piece.chunk_offset, piece.chunk_offset + piece.size());
        copy_(dst, it->second);
      }
      Tensor all = gather_chunks(chunk, u);
      for (size_t k = 0; k < unit.params.size(); ++k) {
        const Tensor& p = z_.params[unit.params[k]].second;
        whole[unit.params[k]][name] =
            clone(all.slice(0, unit.offsets[k], unit.offsets[k] + unit.sizes[k])).view(p.shape());
      }
    }
  }
  for (size_t i = 0; i < z_.params.size(); ++i)
    for (const auto& [name, t] : whole[i]) out.emplace_back(std::to_string(i) + "." + name, t);
  return out;
}

void ZeroDataParallel::Impl::load_full_optimizer_state(optim::Optimizer& optimizer, const nn::StateDict& state) {
  autograd::NoGradGuard no_grad;
  nn::StateDict mine;
  for (const auto& [key, t] : state) {
    if (key == "step" || key == "lr") {
      mine.emplace_back(key, t);
      continue;
    }
    const size_t dot = key.find('.');
    TESSERA_CHECK(dot != std::string::npos && dot > 0 &&
                      key.find_first_not_of("0123456789") == dot,
                  "[zero] unexpected optimizer state key '", key, "' (expected step, lr or <index>.<buffer>)");
    const size_t i = std::stoul(key.substr(0, dot));
    TESSERA_CHECK(i < z_.params.size() && t.numel() == z_.params[i].second.numel(), "[zero] optimizer state '", key,
                  "' has ", t.numel(), " elements but parameter ", i < z_.params.size() ? z_.params[i].first : "?",
                  " has ", i < z_.params.size() ? z_.params[i].second.numel() : 0);
    const Piece piece = piece_of(z_.units[unit_of_[i]], position_in_unit_[i], z_.rank);
    mine.emplace_back(key, clone(t.contiguous().view({t.numel()}).slice(0, piece.begin, piece.end)));
  }
  optimizer.load_state_dict(mine);
}

ZeroMemory ZeroDataParallel::Impl::memory(const optim::Optimizer* optimizer) const {
  ZeroMemory m;
  for (size_t u = 0; u < z_.units.size(); ++u) {
    if (z_.full[u].impl()->storage->resident()) m.parameters += bytes_of(z_.full[u]);
    if (layout_->chunks_apart()) m.parameters += bytes_of(z_.shard[u]);
    m.gradients += bytes_of(grad_shard_[u]) + bytes_of(grad_flat_[u]) + bytes_of(received_[u]);
  }
  for (const auto& [name, p] : z_.params) m.gradients += bytes_of(p.grad());
  if (optimizer != nullptr)
    for (const auto& [key, t] : optimizer->state_dict())
      if (key != "step" && key != "lr") m.optimizer_state += bytes_of(t);
  return m;
}

}  // namespace tessera::parallel::zero
