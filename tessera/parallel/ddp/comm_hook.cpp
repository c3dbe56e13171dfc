#include "tessera/parallel/ddp/comm_hook.h"

#include <map>

#include "tessera/core/error.h"

namespace tessera::parallel::ddp {

namespace {

class AllreduceHook : public CommHook {
 public:
  std::string name() const override { return "none"; }
  void start(dist::ProcessGroup& group, int index, const Tensor& bucket) override {
    bytes_ += bucket.numel() * 4;
    pending_[index] = group.allreduce(bucket, dist::ReduceOp::Avg);
  }
  void finish(dist::ProcessGroup&, int index, const Tensor&) override {
    auto it = pending_.find(index);
    TESSERA_ASSERT(it != pending_.end(), "bucket ", index, " finished without being started");
    dist::WorkPtr work = std::move(it->second);
    pending_.erase(it);
    work->wait();
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
