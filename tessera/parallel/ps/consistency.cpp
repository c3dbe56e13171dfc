#include "tessera/parallel/ps/consistency.h"

#include "tessera/core/error.h"

namespace tessera::parallel::ps {

using tessera::detail::concat;

Mode parse_mode(const std::string& name) {
  if (name == "sync") return Mode::kSync;
  if (name == "async") return Mode::kAsync;
  if (name == "ssp") return Mode::kBoundedStaleness;
  throw ValueError(concat("[ps] unknown mode '", name, "'; expected sync, async or ssp"));
}

std::string mode_name(Mode mode) {
  return mode == Mode::kSync ? "sync" : mode == Mode::kAsync ? "async" : "ssp";
}

ConsistencyRule::ConsistencyRule(Mode mode, int64_t staleness) : mode_(mode), staleness_(staleness) {
  TESSERA_CHECK(staleness >= 0, "[ps] staleness must be >= 0, got ", staleness);
}

std::optional<std::string> ConsistencyRule::refuse_push(int64_t clock, int rank) const {
  if (mode_ == Mode::kSync && clock != version_)
    return concat("worker ", rank, " pushed step ", clock, " while the servers are at step ", version_);
  return std::nullopt;
}

bool ConsistencyRule::on_push(ServerShard& shard, double lr, std::vector<RowsPush>& rows) {
  if (mode_ == Mode::kSync) {
    for (RowsPush& p : rows) shard.accumulate_rows(*p.piece, p.rows, p.grads);
    sync_lr_ = lr;
    ++sync_pushes_;
    return false;
  }
  shard.step_dense(lr);
  for (RowsPush& p : rows) shard.step_rows(*p.piece, p.rows, p.grads.data(), lr);
  ++version_;
  return true;
}

bool ConsistencyRule::complete_step(ServerShard& shard, int active_workers) {
  if (mode_ != Mode::kSync || sync_pushes_ == 0 || sync_pushes_ < active_workers) return false;
  shard.apply_sums(sync_pushes_, sync_lr_);
  sync_pushes_ = 0;
  ++version_;
  return true;
}

bool ConsistencyRule::may_serve(int64_t pull_clock, int64_t slowest_clock) const {
  switch (mode_) {
    case Mode::kSync: return version_ >= pull_clock;
    case Mode::kAsync: return true;
    case Mode::kBoundedStaleness: return slowest_clock >= pull_clock - staleness_;
  }
  return false;
}

std::string ConsistencyRule::describe() const {
  return mode_name(mode_) + " mode" + (mode_ == Mode::kBoundedStaleness ? concat(", staleness ", staleness_) : "");
}

}  // namespace tessera::parallel::ps
