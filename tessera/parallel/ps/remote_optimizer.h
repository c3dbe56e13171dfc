// The optimizer of a parameter-server worker. The update itself runs on the servers (their
// ShardOptimizer, the same fused update code as a local optimizer's); this one holds what the
// worker decides, the learning rate its schedule sets, and step() pushes this step's gradients at
// that rate and pulls the next values (PsWorker::step). So the rate reaches the servers one way:
// the schedule sets it here, each push carries it.
#pragma once
#include "tessera/optim/optimizer.h"
#include "tessera/parallel/ps/worker.h"

namespace tessera::parallel::ps {

class RemoteOptimizer final : public optim::Optimizer {
 public:
  // `worker` outlives the optimizer (the strategy holds both).
  RemoteOptimizer(std::vector<Tensor> params, double lr, PsWorker& worker)
      : Optimizer(std::move(params), lr), worker_(worker) {}
  void step() override {
    worker_.step(lr_);
    ++step_count_;
  }

 private:
  PsWorker& worker_;
};

}  // namespace tessera::parallel::ps
