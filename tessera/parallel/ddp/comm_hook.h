// Communication hooks: how a bucket's flat gradient is reduced across the group (PyTorch's DDP
// comm hooks). The reducer hands each full bucket to start() from the backward pass and calls
// finish() when it needs the result; on return the bucket holds the average over the group.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tessera/core/tensor.h"
#include "tessera/dist/process_group.h"

namespace tessera::parallel::ddp {

// What a hook sees of one bucket.
struct BucketView {
  int index = 0;                 // bucket number, in launch order
  Tensor flat;                   // contiguous float32: the bucket's gradients back to back
  std::vector<Shape> shapes;     // each parameter's shape, in bucket order
  std::vector<int64_t> offsets;  // each parameter's element offset in `flat`
  int divisor = 1;               // the result is the group's sum divided by this (the ranks that
                                 // contributed: the group's size unless some have joined)
};

class CommHook {
 public:
  virtual ~CommHook() = default;
  virtual std::string name() const = 0;
  // Starts reducing `bucket.flat`; returns at once (the work overlaps the rest of backward).
  virtual void start(dist::ProcessGroup& group, const BucketView& bucket) = 0;
  // Blocks until `bucket.flat` holds the group's sum divided by bucket.divisor.
  virtual void finish(dist::ProcessGroup& group, const BucketView& bucket) = 0;
  // Whether start() all-reduces `bucket.flat` itself (not a compressed copy): then the reducer puts
  // the buckets in symmetric memory (ProcessGroup::symmetric_zeros), which that all-reduce reads
  // and writes across the ranks without copies. For the others it would be /dev/shm spent for nothing.
  virtual bool reduces_bucket_in_place() const { return false; }
  // Bytes this rank has handed to the communication layer so far (payload, per call).
  int64_t bytes_communicated() const { return bytes_; }

 protected:
  int64_t bytes_ = 0;
};

// Settings of the compressing hooks; each hook reads its own.
struct CommHookOptions {
  int powersgd_rank = 4;              // r: PyTorch's matrix_approximation_rank (1 by default there)
  int64_t powersgd_start_iter = 10;   // plain all-reduce before this iteration (start_powerSGD_iter)
  uint64_t powersgd_seed = 0;         // of the initial Q; must agree across ranks
  double topk_ratio = 0.01;           // fraction of each bucket's entries sent, in (0, 1]
  DType allreduce_dtype = DType::Float32;  // "none": the type buckets travel in (float32 or bfloat16)
};

// "none": all-reduce of the bucket with Avg, as float32 or as bfloat16 (summed in float32 by the
// backend, divided in float32 after).
std::unique_ptr<CommHook> make_allreduce_hook(DType wire = DType::Float32);
// Makes a hook by name:
//   "none"      all-reduce, float32 or options.allreduce_dtype (this file)
//   "fp16"      2-byte IEEE half on the wire, float32 sums (compression_hook.h)
//   "bf16"      the same with bfloat16 (compression_hook.h)
//   "powersgd"  rank-r low-rank compression with error feedback (powersgd_hook.h)
//   "topk"      the largest topk_ratio of each bucket, with error feedback (topk_hook.h)
// ValueError naming the choices for any other name, or for options out of range.
std::unique_ptr<CommHook> make_comm_hook(const std::string& name, const CommHookOptions& options = {});

}  // namespace tessera::parallel::ddp
