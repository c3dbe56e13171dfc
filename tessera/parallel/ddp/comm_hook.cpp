#include "tessera/parallel/ddp/comm_hook.h"

#include <map>
#include <memory>

#include "tessera/core/error.h"
#include "tessera/ops/ops.h"
#include "tessera/parallel/ddp/compression_hook.h"
#include "tessera/parallel/ddp/powersgd_hook.h"
#include "tessera/parallel/ddp/topk_hook.h"
#include "tessera/parallel/functional.h"

namespace tessera::parallel::ddp {

namespace {

// The bucket all-reduced as it is (float32), or as bfloat16 (mixed precision's gradients: half the
// bytes; each backend sums bf16 in float32, rounding once (shared memory) or at each ring hop (gloo,
// MPI), as PyTorch's bf16_compress_hook does; the result is divided in float32).
class AllreduceHook : public CommHook {
 public:
  explicit AllreduceHook(DType wire) : wire_(wire) { check_wire_dtype(wire, "[ddp] gradients"); }
  std::string name() const override { return wire_ == DType::Float32 ? "none" : "none (bf16 all-reduce)"; }
  bool reduces_bucket_in_place() const override { return wire_ == DType::Float32; }
  void start(dist::ProcessGroup& group, const BucketView& bucket) override {
    Pending& p = pending_[bucket.index];
    if (wire_ == DType::Float32) {
      bytes_ += bucket.flat.numel() * 4;
      bool average = bucket.divisor == group.size();
      p.work = group.allreduce(bucket.flat, average ? dist::ReduceOp::Avg : dist::ReduceOp::Sum);
      return;
    }
    p.wire = bucket.flat.to(wire_);
    bytes_ += p.wire.numel() * static_cast<int64_t>(dtype_size(wire_));
    p.work = group.allreduce(p.wire, dist::ReduceOp::Sum);
  }
  void finish(dist::ProcessGroup& group, const BucketView& bucket) override {
    auto it = pending_.find(bucket.index);
    TESSERA_ASSERT(it != pending_.end(), "bucket ", bucket.index, " finished without being started");
    Pending p = std::move(it->second);
    pending_.erase(it);
    p.work->wait();
    Tensor flat = bucket.flat;
    if (p.wire.defined()) {
      // Widened and divided in one pass (a division, as the float32 path's Avg).
      const BFloat16* sum = p.wire.data<BFloat16>();
      float* d = flat.data<float>();
      const auto divisor = static_cast<float>(bucket.divisor);
      for (int64_t i = 0; i < flat.numel(); ++i) d[i] = bf16_to_float(sum[i]) / divisor;
    } else if (bucket.divisor != group.size()) {
      mul_(flat, 1.0f / static_cast<float>(bucket.divisor));
    }
  }

 private:
  struct Pending {
    dist::WorkPtr work;
    Tensor wire;  // the bf16 copy in flight (undefined for float32)
  };
  DType wire_;
  std::map<int, Pending> pending_;
};

}  // namespace

std::unique_ptr<CommHook> make_allreduce_hook(DType wire) { return std::make_unique<AllreduceHook>(wire); }

std::unique_ptr<CommHook> make_comm_hook(const std::string& name, const CommHookOptions& options) {
  if (name == "none" || name.empty()) return make_allreduce_hook(options.allreduce_dtype);
  if (name == "fp16") return std::make_unique<CompressionHook>(HalfFormat::Fp16);
  if (name == "bf16") return std::make_unique<CompressionHook>(HalfFormat::Bf16);
  if (name == "powersgd")
    return std::make_unique<PowerSgdHook>(options.powersgd_rank, options.powersgd_start_iter, options.powersgd_seed);
  if (name == "topk") return std::make_unique<TopKHook>(options.topk_ratio);
  throw ValueError(tessera::detail::concat("[DistributedDataParallel] unknown comm hook '", name,
                                           "'; choose none, fp16, bf16, powersgd or topk"));
}

}  // namespace tessera::parallel::ddp
