// Reducer: averages gradients across a process group while backward runs (PyTorch DDP's reducer).
//
// Policy, as PyTorch's:
//   - buckets hold parameters in reverse registration order at first (gradients of the last
//     layers are ready first), a 1 MiB first bucket then 25 MiB ones (bucket.h);
//   - every parameter has a grad-ready hook; its gradient is in its bucket slot by then (backward
//     wrote it there, gradient_as_bucket_view; otherwise the hook copies it in), and
//     when a bucket's last gradient arrives the bucket's all-reduce starts at once, asynchronously,
//     so communication overlaps the rest of backward. Buckets start in index order on every rank
//     (collectives must be issued in the same order everywhere);
//   - when backward ends (autograd::queue_callback) the reducer waits for the buckets, whose slots
//     are the .grad tensors then (else it copies the averages back into .grad), so loss.backward()
//     returns with synchronised gradients;
//   - after the first iteration the buckets are rebuilt once, in the order gradients actually
//     became ready on rank 0 (broadcast, so every rank agrees).
// A parameter that got no gradient is an error naming it, unless find_unused_parameters: then its
// slot is zero, and a small all-reduce of "used" flags keeps .grad unset where no rank used it.
#pragma once
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "tessera/dist/process_group.h"
#include "tessera/nn/module.h"
#include "tessera/parallel/ddp/comm_hook.h"

namespace tessera::parallel::ddp {

// A bucket cap of 0 asks for auto_bucket_cap().
constexpr size_t kAutoBucketCap = 0;

// A quarter of the model's gradient bytes, within [1 MiB, 25 MiB]. PyTorch's fixed 25 MiB makes a
// model of a few MB one bucket (after the first), ready only when backward ends, so its all-reduce
// overlaps nothing: `tessera bench ddp` (2 processes x 1 thread, runs of 3 repeats) hid 57-74% of
// the CNN's (1.7 MB) communication and 58-70% of the GPT's (3.3 MB) with 25 MiB, 65-90% and 83-94%
// with 1 MiB buckets. A large model keeps 25 MiB, where a collective's fixed cost is nothing.
size_t auto_bucket_cap(size_t gradient_bytes);
// A cap given in MiB (config, Python, benches): 0 is kAutoBucketCap, a positive one at least a byte.
size_t bucket_cap_from_mb(double mb);

struct ReducerOptions {
  size_t bucket_cap_bytes = kAutoBucketCap;
  size_t first_bucket_cap_bytes = 1u << 20;
  bool find_unused_parameters = false;
  bool gradient_as_bucket_view = true;  // DdpOptions::gradient_as_bucket_view
};

// Where one synchronised iteration's communication time went (PyTorch's DDP logging data).
struct IterationTrace {
  double comm_seconds = 0;     // the group's worker thread running this iteration's collectives
  double exposed_seconds = 0;  // backward, finished, waiting for them (what overlap did not hide)
  // The fraction of communication that ran while backward was still computing.
  double hidden_fraction() const {
    return comm_seconds > 0 ? std::clamp(1.0 - exposed_seconds / comm_seconds, 0.0, 1.0) : 1.0;
  }
};

class Reducer : public std::enable_shared_from_this<Reducer> {
 public:
  // Registers the hooks; the hooks hold a weak reference, so they do nothing once the reducer is gone.
  static std::shared_ptr<Reducer> create(nn::StateDict parameters, dist::ProcessGroupPtr group,
                                         ReducerOptions options, std::unique_ptr<CommHook> hook);

  // false inside no_sync(): gradients accumulate locally and nothing is communicated.
  void set_sync(bool on) { sync_ = on; }
  bool sync() const { return sync_; }

  // Uneven inputs: the next iteration's gradients are summed over `ranks` contributing ranks
  // (the others have joined) and divided by it. Reset to the group's size after each iteration.
  void set_contributing_ranks(int ranks) { next_divisor_ = ranks; }
  // For a rank that has joined (run out of data): issues exactly the collectives of one synchronised
  // backward pass of the others, contributing zeros, so that they do not wait for it.
  void shadow_iteration();

  // Parameter indices per bucket, in launch order.
  const std::vector<std::vector<size_t>>& buckets() const { return layout_; }
  // Each bucket's flat buffer, in launch order (what the hook all-reduces, or compresses).
  std::vector<Tensor> bucket_buffers() const;
  size_t bucket_cap_bytes() const { return options_.bucket_cap_bytes; }  // auto resolved
  bool rebuilt() const { return rebuilt_; }
  const CommHook& hook() const { return *hook_; }
  const IterationTrace& last_iteration() const { return trace_; }
  // Iterations synchronised so far.
  int64_t iterations() const { return iterations_; }

 private:
  Reducer(nn::StateDict parameters, dist::ProcessGroupPtr group, ReducerOptions options,
          std::unique_ptr<CommHook> hook);
 public:
  // Points the parameters' gradients back at fresh memory (set_grad_buffer).
  ~Reducer();

 private:
  void build_buckets(std::vector<std::vector<size_t>> layout);
  void mark_ready(size_t index);
  void begin_iteration();
  void launch_ready_buckets();
  void finalize();
  // The all-reduce of "some rank used parameter i" flags (find_unused_parameters).
  std::vector<bool> used_anywhere(const std::vector<bool>& used_here);
  void rebuild_buckets();
  Tensor slot(size_t index) const;
  // Whether `grad` is parameter `index`'s slot itself (a bucket view).
  bool in_slot(const Tensor& grad, size_t index) const;
  // Puts parameter `index`'s .grad into its slot unless it is the slot already; with bucket views
  // the slot becomes its .grad.
  void move_into_slot(size_t index);

  nn::StateDict parameters_;
  dist::ProcessGroupPtr group_;
  ReducerOptions options_;
  std::unique_ptr<CommHook> hook_;
  std::vector<size_t> bytes_;

  std::vector<std::vector<size_t>> layout_;
  std::vector<BucketView> views_;       // per bucket: its flat float32 buffer, shapes and offsets
  std::vector<size_t> bucket_of_;       // parameter -> bucket
  std::vector<int64_t> offset_of_;      // parameter -> element offset in its bucket

  bool sync_ = true;
  bool in_iteration_ = false;
  std::vector<bool> ready_;
  std::vector<size_t> pending_;         // per bucket: gradients not yet ready
  size_t next_to_launch_ = 0;
  bool rebuilt_ = false;
  std::vector<size_t> ready_order_;     // first iteration, for the rebuild
  int64_t iterations_ = 0;
  int divisor_ = 1;                     // ranks contributing this iteration (the group's size)
  IterationTrace trace_;
  double busy_at_start_ = 0;            // group busy_seconds() when the iteration began
  int next_divisor_ = 0;                // set_contributing_ranks; 0: the group's size
};

}  // namespace tessera::parallel::ddp
