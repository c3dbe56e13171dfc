#include "tessera/parallel/ddp/comm_hook.h"

#include <map>

#include "tessera/core/error.h"
#include "tessera/ops/ops.h"

namespace tessera::parallel::ddp {

namespace {

class AllreduceHook : public CommHook {
 public:
  std::string name() const override { return "none"; }
  void start(dist::ProcessGroup& group, const BucketView& bucket) override {
    bytes_ += bucket.flat.numel() * 4;
    bool average = bucket.divisor == group.size();
    pending_[bucket.index] = group.allreduce(bucket.flat, average ? dist::ReduceOp::Avg : dist::ReduceOp::Sum);
  }
  void finish(dist::ProcessGroup& group, const BucketView& bucket) override {
    auto it = pending_.find(bucket.index);
    TESSERA_ASSERT(it != pending_.end(), "bucket ", bucket.index, " finished without being started");
    dist::WorkPtr work = std::move(it->second);
    pending_.erase(it);
    work->wait();
    if (bucket.divisor != group.size()) {
      Tensor flat = bucket.flat;
      mul_(flat, 1.0f / static_cast<float>(bucket.divisor));
    }
  }

 private:
  std::map<int, dist::WorkPtr> pending_;
};

}  // namespace

std::unique_ptr<CommHook> make_allreduce_hook() { return std::make_unique<AllreduceHook>(); }

std::unique_ptr<CommHook> make_comm_hook(const std::string& name) {
  if (name == "none" || name.empty()) return make_allreduce_hook();
  throw ValueError(tessera::detail::concat("[DistributedDataParallel] unknown comm hook '", name, "'; choose none"));
}

}  // namespace tessera::parallel::ddp
