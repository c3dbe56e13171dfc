// What one parameter server holds and how it changes: its pieces of the plan (dense slices and
// sparse row ranges, shard_plan.h), their optimizer, and the synchronous step's gradient sums.
// The consistency rule (consistency.h) decides when a push is applied and a pull answered; this
// class does the arithmetic, and checks that a request names pieces and rows this server really
// holds (a ProtocolError naming what was asked otherwise, so the connection that asked is dropped).
#pragma once
#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "tessera/core/tensor.h"
#include "tessera/parallel/ps/server_checkpoint.h"
#include "tessera/parallel/ps/shard_optimizer.h"
#include "tessera/parallel/ps/shard_plan.h"

namespace tessera::parallel::ps {

// A piece of the plan this server holds.
struct HeldPiece {
  int piece = 0;      // index into plan.pieces()
  Tensor values;      // dense: 1-D; sparse: (rows, row_size)
  Tensor grad;        // dense: the pushed gradient (asynchronous) or this step's sum (synchronous)
  bool sparse = false;
  size_t slot = 0;    // index among the dense or among the sparse pieces
  // synchronous sparse: this step's touched rows (local) -> offset in row_grads
  std::unordered_map<int64_t, size_t> row_slot;
  std::vector<float> row_grads;
};

class ServerShard {
 public:
  ServerShard(std::vector<ParamSpec> specs, int server_rank, int num_servers, const OptimizerSpec& optimizer);

  const ShardPlan& plan() const { return plan_; }
  int64_t elements() const { return plan_.elements_of(server_rank_); }
  std::vector<HeldPiece>& held() { return held_; }
  const std::vector<HeldPiece>& held() const { return held_; }

  // Piece `piece` of the plan, which this server must hold.
  HeldPiece& piece(uint32_t piece, const char* what);
  // The sparse piece of `param` that holds every row in `ids` (global rows of the parameter).
  HeldPiece& rows_of(uint32_t param, const std::vector<int64_t>& ids, const char* what);
  int64_t row_size(const HeldPiece& h) const;
  int64_t row_begin(const HeldPiece& h) const { return plan_.pieces()[h.piece].row_begin; }

  // Initial values of rows [first_row, ...) of `piece`, as sent by a worker; checked, and written
  // only when `write` (a server restored from a checkpoint keeps what it read).
  void init_rows(uint32_t piece, int64_t first_row, const uint8_t* data, size_t bytes, bool write);

  // Asynchronous: one optimizer step of the dense pieces with the gradients in their `grad`, and of
  // the given rows (local) of sparse pieces.
  void step_dense(double lr);
  void step_rows(HeldPiece& h, const std::vector<int64_t>& local_rows, const float* grads, double lr);
  // Synchronous: this step's sums. Dense gradients are added to `grad` by the caller; rows here.
  void accumulate_rows(HeldPiece& h, const std::vector<int64_t>& local_rows, const std::vector<float>& grads);
  // The step's sums averaged over `pushes` gradients and applied; the sums start again from zero.
  void apply_sums(int pushes, double lr);

  // For checkpoints: the held pieces (sharing storage) and the optimizer.
  std::vector<HeldShard> shards() const;
  ShardOptimizer& optimizer() { return *optimizer_; }

 private:
  int server_rank_;
  ShardPlan plan_;
  std::vector<HeldPiece> held_;
  std::vector<int> held_of_param_;  // param -> index into held_, or -1
  std::unique_ptr<ShardOptimizer> optimizer_;
};

}  // namespace tessera::parallel::ps
