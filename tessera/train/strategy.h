// Strategy: how one training job is spread over processes. The one training loop (trainer.cpp) is
// written once against these hooks and never asks which strategy it runs:
//
//   batch (this replica's share of the global batch: data_share)
//     -> forward_backward(batch)          model, loss, backward; gradients synchronised
//     -> clip_gradients(max_norm)         by the norm over everything the strategy splits
//     -> optimizer_step(optimizer)        (a parameter-server worker's pushes and pulls)
//     -> any_rank(stop)                   every rank agrees on stopping after the same step
//   evaluation: evaluate_batch(batch) on each rank's eval_share, sums added by sum_over_job
//   checkpoint: model_state() (the whole model, on the writing rank), before_checkpoint / resume;
//               sharded: checkpoint_pieces() on every rank, load_pieces() at any layout
//
// The strategies (one file each, chosen once from the config by make_strategy, make_strategy.h):
//   local  one process
//   ddp    replicas, gradients all-reduced in buckets during backward (parallel/ddp); with a
//          mixture's experts spread over the ranks (expert parallel), or each sequence cut over
//          them (context parallel)
//   zero   replicas with the optimizer state, gradients and (stage 3) parameters cut into pieces;
//          hsdp: the same inside each host, the hosts' replicas kept equal (one class)
//   local_sgd  replicas that train alone for H steps, then meet in one outer step (DiLoCo)
//   ps     parameter-server worker: push gradients, pull values; the servers run the optimizer
//   mesh   DP x PP x TP: pipeline stages, tensor-parallel shards, data-parallel replicas
// A new strategy is one more file: a class implementing these hooks and a line in make_strategy.
#pragma once
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "tessera/data/dataset.h"
#include "tessera/dist/process_group.h"
#include "tessera/io/piece_reader.h"
#include "tessera/io/piece_writer.h"
#include "tessera/nn/module.h"
#include "tessera/optim/optimizer.h"
#include "tessera/train/config.h"
#include "tessera/train/objective.h"

namespace tessera::parallel::zero {
class ShardBuddies;
}

namespace tessera::train {

// Which share of the data a process reads: replica `index` of `count` replicas. Processes of one
// replica (the stages and shards of a model-parallel replica) read the same batches.
struct DataShare {
  int index = 0, count = 1;
};

// A batch's contribution to the evaluation, where this rank reports it.
struct EvalContribution {
  Tensor loss;    // the batch's mean loss (scalar)
  Tensor output;  // logits (N, classes) for a classifier; undefined where there is no accuracy
  int64_t hits = -1;  // where the objective counts its own hits (MIL-NCE's in-batch R@1): the accuracy's numerator
};

// Where a run writes: the output directory and the run's id. A strategy keeps its own files under
// <dir>/<its folder>/<run id>/, so a run prunes only what it wrote (a longer run's files left in the
// same directory never push this run's out of the retention).
struct RunOutput {
  std::string dir, run_id;
};

// The sums an evaluation adds up over the job.
struct EvalSums {
  double loss_sum = 0.0;         // mean loss × weight, summed
  int64_t correct = 0, samples = 0, weight = 0;  // weight: tokens for the LM, samples otherwise
};

// Turns a model's output and the batch's targets into the loss (cross-entropy over classes or tokens).
Tensor default_loss(const Tensor& output, const Tensor& targets);

class Strategy {
 public:
  virtual ~Strategy() = default;
  virtual std::string name() const = 0;

  // The job: rank 0 reports, writes metrics and checkpoints.
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  virtual DataShare data_share() const = 0;

  // Takes the whole model, as every rank built it from the same seed, and makes it this process's
  // part (wrapped for DDP, cut into a stage and shards for the mesh). Returns the parameters this
  // process's optimizer updates. Collective.
  virtual std::vector<Tensor> prepare(std::shared_ptr<nn::Module> model) = 0;
  virtual void set_training(bool training) = 0;

  // forward -> loss -> backward of one batch, leaving synchronised gradients. Returns the loss to
  // report (this rank's for DDP, the replicas' mean for the mesh).
  virtual double forward_backward(const data::Batch& batch) = 0;
  // Scales the gradients so their global norm is at most max_norm.
  virtual void clip_gradients(double max_norm) = 0;
  // fp16 loss scaling (optim/grad_scaler.h): forward_backward back-propagates loss × scale ...
  void set_loss_scale(double scale) { loss_scale_ = scale; }
  // ... and this multiplies the gradients by inv_scale again. True on every rank if any rank's
  // gradients hold an inf or NaN; their gradients are then dropped, and the step must be skipped.
  // Collective.
  virtual bool unscale_gradients(double inv_scale) = 0;
  virtual void optimizer_step(optim::Optimizer& optimizer) { optimizer.step(); }
  // The strategy's own optimizer where the update runs elsewhere (the parameter servers'), over
  // the parameters prepare() returned, at `lr`; null: the one the config names.
  virtual std::unique_ptr<optim::Optimizer> own_optimizer(std::vector<Tensor>& /*params*/, double /*lr*/) {
    return nullptr;
  }
  // The largest of every rank's `value` (one tiny all-reduce where there are peers; a parameter-server
  // worker's own value: the workers never wait for each other).
  virtual int64_t max_over_job(int64_t value) = 0;
  // True on every rank if `flag` is on any.
  bool any_rank(bool flag) { return max_over_job(flag ? 1 : 0) != 0; }

  // Evaluation: the share of the evaluation set this rank reads (replica index of count), its part
  // of a batch (nullopt where this rank does not report), and the sums added over the job.
  virtual DataShare eval_share() const { return data_share(); }
  virtual bool takes_part_in_evaluation() const { return true; }
  virtual std::optional<EvalContribution> evaluate_batch(const data::Batch& batch) = 0;
  virtual void sum_over_job(EvalSums& sums) = 0;
  // Before evaluating (asynchronous parameter servers: pull the newest values).
  virtual void before_evaluation() {}

  // The whole model under its single-process names on rank 0 (empty elsewhere). Collective.
  virtual nn::StateDict model_state() = 0;
  // Loads a whole model's state (a resume). Collective where the strategy shards it.
  virtual void load_model_state(const nn::StateDict& state) = 0;
  // The optimizer's state as one process's optimizer over the whole model would hold it ("step",
  // "lr", "<parameter index>.<buffer>"), on rank 0 (empty elsewhere), so that a checkpoint resumes at
  // any layout. Collective where the strategy splits the model.
  virtual nn::StateDict optimizer_state(const optim::Optimizer& optimizer) { return optimizer.state_dict(); }
  // Loads such a state into this rank's optimizer (its part of it, where the model is split).
  virtual void load_optimizer_state(optim::Optimizer& optimizer, const nn::StateDict& state) {
    optimizer.load_state_dict(state);
  }
  // Sharded checkpoints (train.checkpoint_format = "sharded", io/checkpoint_manifest.h): the pieces of
  // the whole model's and optimizer's logical tensors this rank writes. Collective. By default rank 0
  // writes the whole state (model_state, optimizer_state), one piece per tensor; strategies that
  // split the model override it so that each rank writes only its own part.
  virtual std::vector<io::SavePiece> checkpoint_pieces(const optim::Optimizer& optimizer);
  // Whether ranks other than 0 write pieces (the trainer then waits for every rank's before rank 0
  // writes the manifest).
  virtual bool every_rank_writes_pieces() const { return false; }
  // The whole model's logical tensors (model/<name>) in one process's order, where ranks other than 0
  // write some of them (the manifest lists them so); empty: rank 0's pieces are in that order.
  virtual std::vector<std::string> checkpoint_order() const { return {}; }
  // Loads this rank's part of the state from a sharded checkpoint written at any layout. By default
  // the whole state is read and given to load_model_state and load_optimizer_state; strategies that
  // split the model read only the pieces that overlap their part. Collective where they split it.
  virtual void load_pieces(io::PieceReader& reader, optim::Optimizer& optimizer);
  // Whether this process keeps the whole model after prepare (the mesh keeps only its stage's shards,
  // so Trainer::model() is refused there and full_state_dict() gathers it).
  virtual bool keeps_whole_model() const { return true; }
  // Whether every rank holds the whole training state (the survivors of an elastic job can save it).
  virtual bool holds_whole_state() const { return false; }
  // Live membership of a job whose optimizer state is cut over the ranks (ZeRO stages 1 and 2;
  // trainer_live.cpp): whether the strategy keeps each rank's pieces on a neighbour too, so that a
  // lost rank's can be found; commit_step hands this rank's pieces after the trainer's `step` to
  // its neighbour (collective); shard_buddies gives what it keeps (null where it keeps nothing).
  virtual bool shards_live_state() const { return false; }
  virtual void commit_step(const optim::Optimizer& /*optimizer*/, int64_t /*step*/) {}
  virtual const parallel::zero::ShardBuddies* shard_buddies() const { return nullptr; }

  // Around fit: the parameter-server workers start (or restore) the servers and finish them.
  virtual void on_fit_start(int64_t /*step*/, bool /*resumed*/, const RunOutput& /*run*/) {}
  virtual void on_fit_end() {}
  // On rank 0, before the checkpoint of `step` is gathered and written (the servers write their
  // shards first).
  virtual void before_checkpoint(const RunOutput& /*run*/, int64_t /*step*/) {}
  // The strategy's figures for this step's metrics record.
  virtual void add_step_metrics(nlohmann::json& /*record*/) const {}
  // The one-line description the lead rank logs at the start ("" for none).
  virtual std::string describe() const { return ""; }

  // The trainer sets a model's own objective before prepare (strategies that support one use it).
  virtual bool supports_objectives() const { return false; }
  void set_objective(Objective objective) { objective_ = std::move(objective); }

 protected:
  Objective objective_;
  double loss_scale_ = 1.0;
};

}  // namespace tessera::train
