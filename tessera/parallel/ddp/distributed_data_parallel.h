// DistributedDataParallel: synchronous data parallelism (PyTorch's DistributedDataParallel,
// Horovod's DistributedOptimizer). Each rank holds a replica, trains on its shard of every batch,
// and loss.backward() returns with gradients averaged over the group (reducer.h), so the
// optimizer step is the single-process one:
//
//   auto group = dist::init_process_group();
//   parallel::ddp::DistributedDataParallel ddp(model, group);
//   Tensor loss = cross_entropy(ddp(x), y);
//   loss.backward();          // buckets all-reduced while backward runs
//   optimizer.step();
//
// Construction checks that every rank's model has the same parameter names and shapes (an error
// naming the first difference) and broadcasts parameters and buffers from rank 0. Each forward in
// training mode broadcasts the buffers (BatchNorm statistics) from rank 0 first, as PyTorch's
// broadcast_buffers. no_sync() accumulates gradients locally (gradient accumulation).
#pragma once
#include <memory>
#include <set>
#include <string>

#include "tessera/dist/process_group.h"
#include "tessera/nn/module.h"
#include "tessera/parallel/ddp/reducer.h"

namespace tessera::parallel::ddp {

struct DdpOptions {
  size_t bucket_cap_bytes = kAutoBucketCap;  // 0: auto_bucket_cap (reducer.h)
  size_t first_bucket_cap_bytes = 1u << 20;
  bool find_unused_parameters = false;
  // Each parameter's .grad is a view of its slot in the bucket (PyTorch's gradient_as_bucket_view,
  // on by default here): the gradient is written once, by backward, where the all-reduce reads it
  // and leaves the average. Off, DDP copies every gradient into its bucket and the average back,
  // two copies of the model's gradients a step: with it on, the MLP's backward under DDP (2
  // processes, batch 64 each) went from 1.74 to 1.50 ms (bench ddp's step breakdown, one run each).
  // On, a .grad kept from one step to the next is overwritten by the next backward.
  bool gradient_as_bucket_view = true;
  bool broadcast_buffers = true;
  // Whether construction broadcasts rank 0's parameters and buffers to every replica. false: the
  // caller gives the replicas one member's values itself, right after (a live job's membership
  // change, train/trainer_live.cpp: a change that fails half-way then leaves every member its own
  // consistent state).
  bool broadcast_initial_state = true;
  std::string comm_hook = "none";  // none, fp16, bf16, powersgd, topk: see make_comm_hook in comm_hook.h
  CommHookOptions comm_hook_options;
  // Ranks may run different numbers of iterations (PyTorch's Join): each training forward
  // all-reduces how many ranks are still active, gradients are averaged over those, and a rank
  // that has run out of data calls join(). Costs one small all-reduce per iteration.
  bool uneven_inputs = false;
  // Parameters each rank keeps its own (PyTorch's _ddp_params_and_buffers_to_ignore): neither
  // broadcast from rank 0 nor all-reduced. Expert parallelism's experts, which differ by rank.
  std::set<std::string> ignored_parameters;
};

class DistributedDataParallel {
 public:
  DistributedDataParallel(std::shared_ptr<nn::Module> module, dist::ProcessGroupPtr group, DdpOptions options = {});

  Tensor forward(const Tensor& input);
  Tensor operator()(const Tensor& input) { return forward(input); }

  // While alive, backward passes accumulate into .grad without communicating; the first backward
  // after it synchronises the accumulated gradients.
  class NoSync {
   public:
    explicit NoSync(Reducer& reducer) : reducer_(reducer) { reducer_.set_sync(false); }
    ~NoSync() { reducer_.set_sync(true); }
    NoSync(const NoSync&) = delete;
    NoSync& operator=(const NoSync&) = delete;

   private:
    Reducer& reducer_;
  };
  [[nodiscard]] std::unique_ptr<NoSync> no_sync() { return std::make_unique<NoSync>(*reducer_); }

  nn::Module& module() { return *module_; }
  const std::shared_ptr<nn::Module>& module_ptr() const { return module_; }
  dist::ProcessGroup& group() { return *group_; }
  const Reducer& reducer() const { return *reducer_; }

  // Broadcasts every buffer from rank 0 (what forward does in training mode).
  void broadcast_buffers();

  // Uneven inputs (options.uneven_inputs): called by every rank once it has no more data. Until all
  // ranks have called it, this rank shadows the others' iterations (their collectives, with zero
  // gradients), so none of them waits for it; then every rank takes the parameters and buffers of
  // the rank that ran the most iterations. The optimizer state of ranks that joined early is stale,
  // as in PyTorch. Returns the number of iterations this rank shadowed.
  int64_t join();
  // Training iterations this rank ran with data.
  int64_t iterations_with_data() const { return active_iterations_; }

 private:
  void check_same_model();
  // One all-reduce of {active, synchronising} over the group; returns the sums.
  std::pair<int64_t, int64_t> count_active(bool active, bool synchronising);
  void sync_final_model();
  // Parameters (when asked) and buffers from `source`, all broadcasts in flight at once.
  void broadcast_state(int source, bool with_parameters);

  std::shared_ptr<nn::Module> module_;
  dist::ProcessGroupPtr group_;
  DdpOptions options_;
  std::shared_ptr<Reducer> reducer_;
  int64_t active_iterations_ = 0;
};

}  // namespace tessera::parallel::ddp
