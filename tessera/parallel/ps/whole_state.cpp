#include "tessera/parallel/ps/whole_state.h"

#include <climits>
#include <map>

#include "tessera/core/error.h"
#include "tessera/ops/ops.h"
#include "tessera/parallel/ps/server_checkpoint.h"

namespace tessera::parallel::ps {

using tessera::detail::concat;

namespace {

// One server holds every parameter as one piece: piece p is parameter p; its slot counts the dense
// (or the sparse) parameters before it.
std::vector<HeldShard> one_server_pieces(const std::vector<ParamSpec>& specs) {
  std::vector<HeldShard> held;
  size_t dense = 0, sparse = 0;
  for (size_t p = 0; p < specs.size(); ++p) {
    HeldShard h;
    h.piece = static_cast<int>(p);
    h.sparse = specs[p].sparse;
    h.slot = h.sparse ? sparse++ : dense++;
    h.values = h.sparse ? zeros({specs[p].rows, specs[p].row_size}) : zeros({specs[p].numel()});
    held.push_back(h);
  }
  return held;
}

// "dense.<slot>" / "sparse.<slot>" -> the parameter's index.
std::map<std::string, size_t> parameter_of_slot(const std::vector<HeldShard>& held) {
  std::map<std::string, size_t> out;
  for (const HeldShard& h : held) out[concat(h.sparse ? "sparse." : "dense.", h.slot)] = static_cast<size_t>(h.piece);
  return out;
}

}  // namespace

nn::StateDict read_servers_optimizer_state(const std::string& dir, int64_t step, const std::vector<ParamSpec>& specs,
                                           const std::vector<Shape>& shapes) {
  TESSERA_CHECK(shapes.size() == specs.size(), "[ps] ", shapes.size(), " shapes for ", specs.size(), " parameters");
  const ShardPlan plan(specs, 1);
  std::vector<HeldShard> held = one_server_pieces(specs);
  const RestoredShard restored = restore_server_shard(dir, step, 0, 1, plan, held);
  const auto parameter = parameter_of_slot(held);
  nn::StateDict out;
  for (const auto& [key, t] : restored.optimizer_state) {
    if (key == "dense.step" || key == "dense.lr") {  // the scalars of the servers' dense optimizer
      out.emplace_back(key.substr(6), t);
      continue;
    }
    const size_t slot_end = key.find('.', key.find('.') + 1);
    auto it = slot_end == std::string::npos ? parameter.end() : parameter.find(key.substr(0, slot_end));
    if (it == parameter.end()) throw IoError(concat("[ps] ", dir, ": unexpected optimizer state '", key, "' at step ", step));
    const std::string buffer = key.substr(slot_end + 1);
    if (buffer == "step") continue;  // a sparse table's own count: one process counts the job's steps
    out.emplace_back(concat(it->second, ".", buffer), t.contiguous().view(shapes[it->second]));
  }
  return out;
}

void write_servers_state(const std::string& dir, int64_t step, const std::vector<ParamSpec>& specs,
                         const std::vector<Tensor>& values, const nn::StateDict& optimizer) {
  TESSERA_CHECK(values.size() == specs.size(), "[ps] ", values.size(), " values for ", specs.size(), " parameters");
  const ShardPlan plan(specs, 1);
  std::vector<HeldShard> held = one_server_pieces(specs);
  for (HeldShard& h : held) h.values = values[static_cast<size_t>(h.piece)].contiguous().view(h.values.shape());
  nn::StateDict state;
  Tensor job_step;
  for (const auto& [key, t] : optimizer) {
    const size_t dot = key.find('.');
    if (dot == std::string::npos) {  // step, lr
      state.emplace_back("dense." + key, t);
      if (key == "step") job_step = t;
      continue;
    }
    size_t index = 0;
    try {
      index = std::stoul(key.substr(0, dot));
    } catch (const std::exception&) {
      throw ValueError(concat("[ps] unexpected optimizer state '", key, "'"));
    }
    TESSERA_CHECK(index < held.size(), "[ps] optimizer state '", key, "' names parameter ", index, " of ", held.size());
    const HeldShard& h = held[index];
    state.emplace_back(concat(h.sparse ? "sparse." : "dense.", h.slot, ".", key.substr(dot + 1)),
                       t.contiguous().view(h.values.shape()));
  }
  if (job_step.defined())  // a sparse table's Adam steps: the job's, as one process's optimizer took them
    for (const HeldShard& h : held)
      if (h.sparse) state.emplace_back(concat("sparse.", h.slot, ".step"), job_step);
  ShardCheckpoint at;
  at.server_rank = 0, at.num_servers = 1, at.step = step, at.version = step, at.keep = INT_MAX;
  save_server_shard(dir, at, plan, held, state);
}

}  // namespace tessera::parallel::ps
