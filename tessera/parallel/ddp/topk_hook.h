// "topk": sparsification with error feedback (Stich, Cordonnier and Jaggi, "Sparsified SGD with
// Memory", NeurIPS 2018; Lin et al., "Deep Gradient Compression", ICLR 2018). Per bucket:
//   v = grad + error                          error: what earlier iterations did not send
//   keep the k = max(1, ceil(ratio · numel)) entries of largest |v| (ties: the lower index)
//   allgather 2k float32 per rank: (index, value) pairs, the index's int32 bits in a float32 slot
//   bucket = Σ over ranks of the pairs, scatter-added into zeros in rank order, / divisor
//   error = v with the sent entries zeroed
// Every rank sends the same k, so one fixed-size allgather suffices; bytes_communicated() grows by
// 8k per bucket (2% of the float32 payload at ratio 0.01). Unlike an all-reduce, the receive side
// grows with the group (size · 8k bytes), so top-k pays off for small ratios and groups.
// An entry that is never among the largest keeps accumulating in `error` until it is, so with a
// constant gradient every coordinate is eventually sent (comm_hook_test.cpp).
#pragma once
#include <map>

#include "tessera/parallel/ddp/comm_hook.h"

namespace tessera::parallel::ddp {

class TopKHook : public CommHook {
 public:
  explicit TopKHook(double ratio);
  std::string name() const override { return "topk"; }
  void start(dist::ProcessGroup& group, const BucketView& bucket) override;
  void finish(dist::ProcessGroup& group, const BucketView& bucket) override;

  // The k sent for a bucket of `numel` elements.
  int64_t k_for(int64_t numel) const;

 private:
  struct BucketState {
    std::vector<Shape> shapes;  // the layout `error` belongs to
    std::vector<int64_t> offsets;
    Tensor error;     // (numel)
    Tensor gathered;  // (size · 2k) between start and finish
    dist::WorkPtr work;
  };
  double ratio_;
  std::map<int, BucketState> buckets_;
};

}  // namespace tessera::parallel::ddp
