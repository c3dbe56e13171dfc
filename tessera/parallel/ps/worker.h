// PsWorker: trains a model against parameter servers. The loop, per step t:
//
//   forward (an EmbeddingBag pulls just the rows of this batch) -> backward
//   -> step(lr): push the gradients of step t, pull the values for step t+1
//
// The optimizer runs on the servers, so the worker has none; the learning rate travels with each
// push (the worker's schedule decides it). Worker 0 initialises the servers from its model (all
// workers build the same model from the same seed), or has them restore a checkpoint.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "tessera/nn/embedding_bag.h"
#include "tessera/nn/module.h"
#include "tessera/parallel/ps/client.h"

namespace tessera::parallel::ps {

class PsWorker {
 public:
  // Every nn::EmbeddingBag inside `model` becomes a sparse parameter: its rows are pulled and
  // pushed per batch instead of the whole table.
  PsWorker(std::shared_ptr<nn::Module> model, ClientOptions options);
  ~PsWorker();

  // Registers the model, initialises the servers (worker 0; or restores step `start_step` from
  // `restore_dir` when it is not empty), then pulls the values to start from.
  void start(int64_t start_step = 0, const std::string& restore_dir = "");
  // After backward: pushes this step's gradients and pulls the next step's values.
  void step(double lr);
  // Worker 0: every server writes its shard of step `step` under `dir`.
  void save(const std::string& dir, int64_t step) { client_.save(dir, step); }
  // Pulls the newest values without pushing (e.g. before evaluating in asynchronous mode).
  void refresh();
  // Copies every sparse table from the servers into its EmbeddingBag's local weight (for a complete
  // model checkpoint); forward never reads that copy.
  void pull_sparse_tables();
  void finish();

  int64_t clock() const { return clock_; }
  const ClientCounters& counters() const { return client_.counters(); }
  // Servers that take this worker's dense values through shared memory (on its machine).
  int shared_memory_servers() const { return client_.shared_memory_servers(); }
  // The segment the dense parameters and their gradients live in (null: they live in the process).
  const std::shared_ptr<ShmChannel>& shared_memory() const { return client_.shared_memory(); }
  const ShardPlan& plan() const { return client_.plan(); }
  const std::vector<Tensor>& parameters() const { return params_; }  // the model's, in spec order
  const std::vector<ParamSpec>& specs() const { return specs_; }     // how the servers hold them

 private:
  void pull_dense();
  // Where the servers on this machine took the shared-memory segment: the dense parameters become
  // views of its values region and backward writes their gradients into its gradients region, so
  // push and pull copy nothing on this side (the servers read the gradients and write the values in
  // place).
  void bind_to_shared_memory();
  // Where pulled dense values land (the parameters' own memory; nullptr for sparse ones), and the
  // version bump that tells autograd they changed.
  std::vector<float*> dense_values();
  void dense_values_changed();

  std::shared_ptr<nn::Module> model_;
  ClientOptions options_;
  PsClient client_;
  std::vector<Tensor> params_;  // in spec order
  std::vector<ParamSpec> specs_;
  // Per parameter, the EmbeddingBag that owns it when it is sparse (else null).
  std::vector<std::shared_ptr<nn::EmbeddingBag>> bags_;
  int64_t clock_ = 0;
  bool finished_ = false;
};

}  // namespace tessera::parallel::ps
