// A rank's pieces packed flat, and the whole state from every rank's (zero_data_parallel.h's
// PackedPieces): what live membership keeps on a neighbour and sends to the member that rebuilds
// the state after a loss (shard_buddies.h, train/trainer_live.cpp). The layout follows from the
// units (flat_unit.h), so any rank can size and read any other rank's pieces.
#include <bit>
#include <cstring>
#include <map>
#include <set>

#include "tessera/autograd/grad_mode.h"
#include "tessera/ops/ops.h"
#include "tessera/parallel/zero/zero_data_parallel_impl.h"

namespace tessera::parallel::zero {

using tessera::detail::concat;

namespace {

// The optimizer's buffers per model parameter, by name ("<index>.<name>" keys).
std::vector<std::map<std::string, Tensor>> buffers_by_parameter(const nn::StateDict& state, size_t count,
                                                                std::set<std::string>& names) {
  std::vector<std::map<std::string, Tensor>> out(count);
  for (const auto& [key, t] : state) {
    if (key == "step" || key == "lr") continue;
    const size_t dot = key.find('.');
    TESSERA_CHECK(dot != std::string::npos, "[zero] unexpected optimizer state key '", key, "'");
    const size_t i = std::stoul(key.substr(0, dot));
    TESSERA_CHECK(i < count, "[zero] optimizer state '", key, "' for a parameter the model does not have");
    out[i][key.substr(dot + 1)] = t;
    names.insert(key.substr(dot + 1));
  }
  return out;
}

}  // namespace

int64_t ZeroDataParallel::packed_size(int rank, size_t buffers) const {
  const auto& z = impl_->z_;
  int64_t values = 0, pieces = 0;
  for (const FlatUnit& unit : z.units) {
    values += unit.chunk;
    for (size_t k = 0; k < unit.params.size(); ++k) pieces += piece_of(unit, k, rank).size();
  }
  return values + kPackedHeaderValues + static_cast<int64_t>(buffers) * pieces;
}

int64_t ZeroDataParallel::packed_parameters_size() const {
  int64_t values = 0;
  for (const FlatUnit& unit : impl_->z_.units) values += unit.chunk;
  return values;
}

void ZeroDataParallel::copy_parameter_chunks(int rank, Tensor& packed) const {
  const auto& z = impl_->z_;
  TESSERA_CHECK(impl_->options_.stage < 3, "[zero] stage 3 keeps no whole parameters to copy a rank's chunks from");
  autograd::NoGradGuard no_grad;
  int64_t at = 0;
  for (size_t u = 0; u < z.units.size(); ++u) {
    const int64_t chunk = z.units[u].chunk;
    Tensor into = packed.slice(0, at, at + chunk);
    if (chunk > 0) copy_(into, z.full[u].slice(0, rank * chunk, (rank + 1) * chunk));
    at += chunk;
  }
}

PackedPieces ZeroDataParallel::pack_pieces(const optim::Optimizer& optimizer, int64_t step, Tensor into) const {
  const Impl& m = *impl_;
  TESSERA_CHECK(m.options_.stage < 3, "[zero] live membership keeps the pieces of stages 1 and 2, not of stage 3");
  autograd::NoGradGuard no_grad;
  std::set<std::string> names;
  const auto buffers = buffers_by_parameter(optimizer.state_dict(), m.z_.params.size(), names);
  PackedPieces out;
  out.step = step;
  out.optimizer_steps = optimizer.step_count();
  out.lr = optimizer.lr();
  out.buffers.assign(names.begin(), names.end());
  const int64_t size = packed_size(m.z_.rank, names.size());
  out.values = into.defined() && into.numel() == size ? into : Tensor::empty({size});
  int64_t at = 0;
  auto put = [&](const Tensor& from) {
    if (from.numel() > 0) {
      Tensor into = out.values.slice(0, at, at + from.numel());
      copy_(into, from.contiguous().view({from.numel()}));
    }
    at += from.numel();
  };
  for (size_t u = 0; u < m.z_.units.size(); ++u) put(m.z_.shard[u]);
  const int64_t header[5] = {out.step, out.optimizer_steps, std::bit_cast<int64_t>(out.lr),
                             static_cast<int64_t>(out.buffers.size()), size};
  std::memcpy(out.values.data<float>() + at, header, sizeof header);
  at += kPackedHeaderValues;
  for (size_t i = 0; i < m.z_.params.size(); ++i)
    for (const std::string& name : out.buffers) {
      auto it = buffers[i].find(name);
      TESSERA_CHECK(it != buffers[i].end() && it->second.numel() == m.pieces_[i].numel(), "[zero] rank ", m.z_.rank,
                    ": the optimizer's '", name, "' of parameter ", m.z_.params[i].first, " is not this rank's piece");
      put(it->second);
    }
  return out;
}

std::pair<nn::StateDict, nn::StateDict> ZeroDataParallel::whole_state_of(const std::vector<PackedPieces>& by_rank) const {
  const Impl& m = *impl_;
  const auto& z = m.z_;
  TESSERA_CHECK(static_cast<int>(by_rank.size()) == z.world, "[zero] the whole state needs the pieces of ", z.world,
                " ranks, got ", by_rank.size());
  autograd::NoGradGuard no_grad;
  const std::vector<std::string>& names = by_rank[0].buffers;
  std::vector<Tensor> full;
  for (const FlatUnit& unit : z.units) full.push_back(zeros({unit.padded()}));
  std::vector<std::map<std::string, Tensor>> whole(z.params.size());
  for (size_t i = 0; i < z.params.size(); ++i)
    for (const std::string& name : names) whole[i][name] = zeros({z.params[i].second.numel()});
  for (int r = 0; r < z.world; ++r) {
    const PackedPieces& p = by_rank[static_cast<size_t>(r)];
    TESSERA_CHECK(p.buffers == names && p.step == by_rank[0].step && p.values.defined() &&
                      p.values.numel() == packed_size(r, names.size()),
                  "[zero] rank ", r, "'s pieces do not match rank 0's (step ", p.step, " against ", by_rank[0].step,
                  ", ", p.buffers.size(), " buffers against ", names.size(), ")");
    int64_t at = 0;
    auto take = [&](Tensor into) {
      if (into.numel() > 0) copy_(into, p.values.slice(0, at, at + into.numel()));
      at += into.numel();
    };
    for (size_t u = 0; u < z.units.size(); ++u) take(full[u].slice(0, r * z.units[u].chunk, (r + 1) * z.units[u].chunk));
    at += kPackedHeaderValues;
    for (size_t i = 0; i < z.params.size(); ++i) {
      const Piece piece = piece_of(z.units[m.unit_of_[i]], m.position_in_unit_[i], r);
      for (const std::string& name : names) take(whole[i][name].slice(0, piece.begin, piece.end));
    }
  }
  std::map<std::string, size_t> index_of;
  for (size_t i = 0; i < z.params.size(); ++i) index_of[z.params[i].first] = i;
  nn::StateDict model;
  for (const auto& [name, t] : m.model_->state_dict()) {
    auto it = index_of.find(name);
    if (it == index_of.end()) {
      model.emplace_back(name, clone(t));  // a buffer (running statistics): every rank's own
      continue;
    }
    const size_t u = m.unit_of_[it->second], k = m.position_in_unit_[it->second];
    const FlatUnit& unit = z.units[u];
    model.emplace_back(name, clone(full[u].slice(0, unit.offsets[k], unit.offsets[k] + unit.sizes[k])).view(t.shape()));
  }
  nn::StateDict optimizer;
  optimizer.emplace_back("step", from_vector(std::vector<int64_t>{by_rank[0].optimizer_steps}, {}));
  optimizer.emplace_back("lr", from_vector(std::vector<float>{static_cast<float>(by_rank[0].lr)}, {}));
  for (size_t i = 0; i < z.params.size(); ++i)
    for (const std::string& name : names)
      optimizer.emplace_back(concat(i, ".", name), whole[i][name].view(z.params[i].second.shape()));
  return {std::move(model), std::move(optimizer)};
}

}  // namespace tessera::parallel::zero
