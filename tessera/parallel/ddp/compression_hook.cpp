#include "tessera/parallel/ddp/compression_hook.h"

#include <algorithm>
#include <vector>

#include "tessera/core/error.h"

namespace tessera::parallel::ddp {

namespace {

// The process group moves float32, int64 and bfloat16; alltoall and allgather only copy bytes, so
// a bfloat16 tensor carries fp16 codes unchanged.
uint16_t* codes(const Tensor& t) { return reinterpret_cast<uint16_t*>(t.data<BFloat16>()); }

}  // namespace

void CompressionHook::start(dist::ProcessGroup& group, const BucketView& bucket) {
  int64_t n = bucket.flat.numel(), size = group.size();
  int64_t block = (n + size - 1) / size;
  Pending p;
  p.sent = Tensor::empty({block * size}, DType::BFloat16);
  p.received = Tensor::empty({block * size}, DType::BFloat16);
  encode_half(format_, bucket.flat.data<float>(), codes(p.sent), n);
  std::fill(codes(p.sent) + n, codes(p.sent) + block * size, uint16_t{0});  // padding: +0 in both formats
  p.work = group.alltoall(p.sent, p.received);
  bytes_ += block * size * 2;
  pending_[bucket.index] = std::move(p);
}

void CompressionHook::finish(dist::ProcessGroup& group, const BucketView& bucket) {
  auto it = pending_.find(bucket.index);
  TESSERA_ASSERT(it != pending_.end(), "bucket ", bucket.index, " finished without being started");
  Pending p = std::move(it->second);
  pending_.erase(it);
  p.work->wait();

  // Reduce this rank's block: received holds block `rank` of every rank, in rank order.
  int64_t n = bucket.flat.numel(), size = group.size();
  int64_t block = p.received.numel() / size;
  std::vector<float> sum(static_cast<size_t>(block), 0.0f), decoded(static_cast<size_t>(block));
  for (int64_t r = 0; r < size; ++r) {
    decode_half(format_, codes(p.received) + r * block, decoded.data(), block);
    for (int64_t i = 0; i < block; ++i) sum[static_cast<size_t>(i)] += decoded[static_cast<size_t>(i)];
  }
  float divisor = static_cast<float>(bucket.divisor);
  for (float& s : sum) s /= divisor;
  Tensor mine = Tensor::empty({block}, DType::BFloat16);
  encode_half(format_, sum.data(), codes(mine), block);

  Tensor gathered = Tensor::empty({block * size}, DType::BFloat16);
  bytes_ += block * 2;
  group.allgather(mine, gathered)->wait();
  decode_half(format_, codes(gathered), bucket.flat.data<float>(), n);  // the padding is dropped
}

}  // namespace tessera::parallel::ddp
