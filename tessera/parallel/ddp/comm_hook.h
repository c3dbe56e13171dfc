// Communication hooks: how a bucket's flat gradient is reduced across the group (PyTorch's DDP
// comm hooks). The reducer hands each full bucket to start() from the backward pass and calls
// finish() when it needs the result; on return the bucket holds the average over the group.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "tessera/core/tensor.h"
#include "tessera/dist/process_group.h"

namespace tessera::parallel::ddp {

class CommHook {
 public:
  virtual ~CommHook() = default;
  virtual std::string name() const = 0;
  // Starts reducing `bucket` (contiguous float32) of bucket number `index`; returns at once.
  virtual void start(dist::ProcessGroup& group, int index, const Tensor& bucket) = 0;
  // Blocks until bucket `index` holds the group's average.
  virtual void finish(dist::ProcessGroup& group, int index, const Tensor& bucket) = 0;
  // Bytes this rank has handed to the communication layer so far (payload, per call).
  int64_t bytes_communicated() const { return bytes_; }

 protected:
  int64_t bytes_ = 0;
};

// "none": all-reduce of the float32 bucket with Avg.
std::unique_ptr<CommHook> make_allreduce_hook();
// Makes a hook by name: "none" (more come with compression). ValueError naming the choices.
std::unique_ptr<CommHook> make_comm_hook(const std::string& name);

}  // namespace tessera::parallel::ddp
