#include "tessera/parallel/ps/server_shard.h"

#include <algorithm>
#include <cstring>

#include "tessera/core/error.h"
#include "tessera/ops/ops.h"
#include "tessera/parallel/ps/protocol.h"

namespace tessera::parallel::ps {

using tessera::detail::concat;

ServerShard::ServerShard(std::vector<ParamSpec> specs, int server_rank, int num_servers, const OptimizerSpec& optimizer)
    : server_rank_(server_rank), plan_(std::move(specs), num_servers) {
  held_of_param_.assign(plan_.specs().size(), -1);
  std::vector<Tensor> dense, sparse;
  for (int index : plan_.pieces_of(server_rank_)) {
    const Piece& piece = plan_.pieces()[index];
    const ParamSpec& spec = plan_.specs()[piece.param];
    HeldPiece h;
    h.piece = index;
    h.sparse = spec.sparse;
    if (spec.sparse) {
      h.values = zeros({piece.rows(), spec.row_size});
      h.slot = sparse.size();
      sparse.push_back(h.values);
    } else {
      h.values = zeros({piece.rows() * spec.row_size});
      h.slot = dense.size();
      h.grad = zeros({piece.rows() * spec.row_size});
      dense.push_back(h.values);
    }
    held_of_param_[piece.param] = static_cast<int>(held_.size());
    held_.push_back(std::move(h));
  }
  optimizer_ = std::make_unique<ShardOptimizer>(optimizer, dense, sparse);
}

HeldPiece& ServerShard::piece(uint32_t piece, const char* what) {
  if (piece >= plan_.pieces().size() || plan_.pieces()[piece].server != server_rank_)
    throw ProtocolError(concat(what, " of piece ", piece, ", which this server does not hold"));
  return held_[held_of_param_[plan_.pieces()[piece].param]];
}

HeldPiece& ServerShard::rows_of(uint32_t param, const std::vector<int64_t>& ids, const char* what) {
  if (param >= plan_.specs().size() || held_of_param_[param] < 0 || !held_[held_of_param_[param]].sparse)
    throw ProtocolError(concat(what, " of parameter ", param, ", which is not a sparse parameter of this server"));
  HeldPiece& h = held_[held_of_param_[param]];
  const Piece& piece = plan_.pieces()[h.piece];
  for (int64_t id : ids)
    if (id < piece.row_begin || id >= piece.row_end)
      throw ProtocolError(concat(what, ": row ", id, " of '", plan_.specs()[param].name, "' is not on this server (it holds [",
                                 piece.row_begin, ", ", piece.row_end, "))"));
  return h;
}

int64_t ServerShard::row_size(const HeldPiece& h) const { return plan_.specs()[plan_.pieces()[h.piece].param].row_size; }

void ServerShard::init_rows(uint32_t index, int64_t first_row, const uint8_t* data, size_t bytes, bool write) {
  HeldPiece& h = piece(index, "init");
  const int64_t rs = row_size(h), rows = plan_.pieces()[index].rows();
  if (bytes % (sizeof(float) * rs) != 0 || first_row < 0 || first_row + int64_t(bytes / (sizeof(float) * rs)) > rows)
    throw ProtocolError(concat("init of piece ", index, ": ", bytes, " bytes at row ", first_row, " do not fit its ", rows,
                               " rows of ", rs));
  if (write) std::memcpy(h.values.data<float>() + first_row * rs, data, bytes);
}

void ServerShard::step_dense(double lr) {
  for (auto& h : held_)
    if (!h.sparse) h.values.set_grad(h.grad);
  optimizer_->step_dense(lr);
  for (auto& h : held_)
    if (!h.sparse) h.values.set_grad(Tensor());
}

void ServerShard::step_rows(HeldPiece& h, const std::vector<int64_t>& local_rows, const float* grads, double lr) {
  optimizer_->step_rows(h.slot, local_rows, grads, lr);
}

void ServerShard::accumulate_rows(HeldPiece& h, const std::vector<int64_t>& local_rows, const std::vector<float>& grads) {
  const int64_t rs = row_size(h);
  for (size_t i = 0; i < local_rows.size(); ++i) {
    auto [it, fresh] = h.row_slot.try_emplace(local_rows[i], h.row_grads.size());
    if (fresh) h.row_grads.resize(h.row_grads.size() + rs, 0.0f);
    float* dst = h.row_grads.data() + it->second;
    for (int64_t k = 0; k < rs; ++k) dst[k] += grads[i * rs + k];
  }
}

void ServerShard::apply_sums(int pushes, double lr) {
  const float scale = 1.0f / static_cast<float>(pushes);
  for (auto& h : held_) {
    if (h.sparse) continue;
    float* sum = h.grad.data<float>();
    const int64_t n = h.grad.numel();  // not in the loop's condition: it is a call, and the loop would not vectorise
    for (int64_t k = 0; k < n; ++k) sum[k] *= scale;
  }
  step_dense(lr);
  for (auto& h : held_) {
    if (!h.sparse) {
      std::fill_n(h.grad.data<float>(), h.grad.numel(), 0.0f);  // the next step's sum starts here
      continue;
    }
    if (h.row_slot.empty()) continue;
    const int64_t rs = row_size(h);
    std::vector<int64_t> rows;
    for (auto& [row, slot] : h.row_slot) rows.push_back(row);
    std::sort(rows.begin(), rows.end());  // the same order whatever order the pushes came in
    std::vector<float> grads(rows.size() * rs);
    for (size_t i = 0; i < rows.size(); ++i) {
      const float* src = h.row_grads.data() + h.row_slot[rows[i]];
      for (int64_t k = 0; k < rs; ++k) grads[i * rs + k] = src[k] * scale;
    }
    optimizer_->step_rows(h.slot, rows, grads.data(), lr);
    h.row_slot.clear();
    h.row_grads.clear();
  }
}

std::vector<HeldShard> ServerShard::shards() const {
  std::vector<HeldShard> out;
  for (const auto& h : held_) out.push_back({h.piece, h.values, h.sparse, h.slot});
  return out;
}

}  // namespace tessera::parallel::ps
