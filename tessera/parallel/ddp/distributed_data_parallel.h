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
#include <string>

#include "tessera/dist/process_group.h"
#include "tessera/nn/module.h"
#include "tessera/parallel/ddp/reducer.h"

namespace tessera::parallel::ddp {

struct DdpOptions {
  size_t bucket_cap_bytes = 25u << 20;
  size_t first_bucket_cap_bytes = 1u << 20;
  bool find_unused_parameters = false;
  bool broadcast_buffers = true;
  std::string comm_hook = "none";  // none, fp16, bf16, powersgd, topk: see make_comm_hook in comm_hook.h
  CommHookOptions comm_hook_options;
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

 private:
  void check_same_model();

  std::shared_ptr<nn::Module> module_;
  dist::ProcessGroupPtr group_;
  DdpOptions options_;
  std::shared_ptr<Reducer> reducer_;
};

}  // namespace tessera::parallel::ddp
