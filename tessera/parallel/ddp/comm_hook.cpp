#include "tessera/parallel/ddp/comm_hook.h"

#include <map>
#include <memory>

#include "tessera/core/error.h"
#include "tessera/ops/ops.h"
#include "tessera/parallel/ddp/compression_hook.h"
#include "tessera/parallel/ddp/powersgd_hook.h"
#include "tessera/parallel/ddp/topk_hook.h"

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

std::unique_ptr<CommHook> make_comm_hook(const std::string& name, const CommHookOptions& options) {
  if (name == "none" || name.empty()) return make_allreduce_hook();
  if (name == "fp16") return std::make_unique<CompressionHook>(HalfFormat::Fp16);
  if (name == "bf16") return std::make_unique<CompressionHook>(HalfFormat::Bf16);
  if (name == "powersgd")
    return std::make_unique<PowerSgdHook>(options.powersgd_rank, options.powersgd_start_iter, options.powersgd_seed);
  if (name == "topk") return std::make_unique<TopKHook>(options.topk_ratio);
  throw ValueError(tessera::detail::concat("[DistributedDataParallel] unknown comm hook '", name,
                                           "'; choose none, fp16, bf16, powersgd or topk"));
}

}  // namespace tessera::parallel::ddp
