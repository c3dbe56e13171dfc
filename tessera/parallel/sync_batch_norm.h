// SyncBatchNorm: batch normalisation whose training statistics are those of the GLOBAL batch — every
// rank's rows together — as torch.nn.SyncBatchNorm. Data parallelism with small per-rank batches
// (detection, segmentation, large-batch runs split over many ranks) otherwise normalises each rank
// with the noisy statistics of a few samples, which the single-process model never sees.
//
// Training forward: per channel, local sum, sum of squares and count -> one all-reduce (sum) of a
// [2C+1] buffer -> global mean and biased variance -> normalise; running statistics move toward the
// global mean and the unbiased global variance (PyTorch's rule). Backward: one all-reduce of the
// per-channel [2C] sums of dy and dy·x̂, after which every rank's input gradient equals the rows of
// the single-process gradient of the sum of all ranks' losses. weight/bias gradients stay local (DDP
// averages them). Evaluation uses the running statistics and does not communicate.
//
// Parameters and buffers have nn::BatchNorm's names (weight, bias, running_mean, running_var,
// num_batches_tracked), so the two load each other's state_dicts.
//
// Numerics: the variance is E[x²] - mean², from float32 sums (accumulated in double on each rank),
// so a channel whose |mean| is many standard deviations loses precision (relative error of the
// variance near 1e-7 · mean²/var), the price of the single all-reduce.
#pragma once
#include <memory>

#include "tessera/dist/process_group.h"
#include "tessera/nn/layers.h"

namespace tessera::parallel {

class SyncBatchNorm : public nn::Module {
 public:
  // x: (N, C, ...) with C = num_features; N may differ between ranks, and be 0 on some.
  SyncBatchNorm(int64_t num_features, dist::ProcessGroupPtr group, float eps = 1e-5f, float momentum = 0.1f);
  // Takes over `source`'s tensors themselves (not copies), as torch's convert_sync_batchnorm does, so
  // an optimizer or DDP built over them keeps working; also its eps, momentum and train/eval mode.
  SyncBatchNorm(const nn::BatchNorm& source, dist::ProcessGroupPtr group);

  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "SyncBatchNorm"; }
  dist::ProcessGroup& group() const { return *group_; }

  Tensor weight, bias, running_mean, running_var, num_batches_tracked;
  float eps, momentum;

 private:
  void check_group() const;
  dist::ProcessGroupPtr group_;
};

// Replaces every nn::BatchNorm (1d and 2d) in the tree under `module` with a SyncBatchNorm over
// `group` holding the same tensors; returns the root (a new module when the root is a BatchNorm).
// A ValueError names any BatchNorm that is referenced from outside its parent's children (a typed
// member the parent's forward calls, say): that reference would keep the unsynchronised layer in use.
std::shared_ptr<nn::Module> convert_sync_batchnorm(const std::shared_ptr<nn::Module>& module,
                                                   const dist::ProcessGroupPtr& group);

}  // namespace tessera::parallel
