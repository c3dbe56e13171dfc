// "fp16" and "bf16": the bucket travels as 2-byte values but is summed in float32.
//
// PyTorch's fp16_compress_hook all-reduces in fp16, so every partial sum is rounded to 11 bits
// (and a sum over many ranks can overflow). Here the reduction is split, as a ring all-reduce is,
// into its two halves, each moving 2-byte values:
//   phase 1 (start):  alltoall of the encoded bucket, cut into group.size() equal blocks (padded
//                     with zeros to a multiple of the size): rank j receives every rank's block j;
//   reduce (finish):  rank j decodes its blocks, sums them in float32 in rank order, divides by the
//                     divisor and encodes the result;
//   phase 2 (finish): allgather of the encoded blocks; every rank decodes the whole bucket.
// So each gradient is rounded twice (encoding the input, encoding the average), whatever the
// group's size, and every rank ends with the same bits. On the wire this is half of a float32
// ring all-reduce; bytes_communicated() counts the buffers handed to the two collectives:
// 2·padded + 2·padded/size bytes per bucket (see comm_hook_test.cpp).
#pragma once
#include <map>
#include <memory>

#include "tessera/parallel/ddp/comm_hook.h"
#include "tessera/core/half_codec.h"

namespace tessera::parallel::ddp {

class CompressionHook : public CommHook {
 public:
  explicit CompressionHook(HalfFormat format) : format_(format) {}
  std::string name() const override { return format_ == HalfFormat::Fp16 ? "fp16" : "bf16"; }
  void start(dist::ProcessGroup& group, const BucketView& bucket) override;
  void finish(dist::ProcessGroup& group, const BucketView& bucket) override;

 private:
  struct Pending {
    Tensor sent, received;  // (size · block) 2-byte codes, carried as bfloat16 (bytes only)
    dist::WorkPtr work;
  };
  HalfFormat format_;
  std::map<int, Pending> pending_;  // by bucket index
};

}  // namespace tessera::parallel::ddp
