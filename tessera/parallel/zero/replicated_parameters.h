// ZeRO stages 1 and 2's parameter layout (parameter_layout.h): the whole parameters on every rank.
#pragma once
#include "tessera/parallel/zero/parameter_layout.h"

namespace tessera::parallel::zero {

class ReplicatedParameters final : public ParameterLayout {
 public:
  ReplicatedParameters(ZeroUnits& units, size_t bucket_cap_bytes) : units_(units), bucket_cap_bytes_(bucket_cap_bytes) {}
  // DDP's buckets: reverse parameter order (the order gradients become ready), at most the cap each.
  std::vector<std::vector<size_t>> group_parameters(nn::Module& model, const ZeroUnits& units) override;
  std::vector<size_t> gradient_order(size_t unit_count) const override;
  Tensor keep_chunk(const Tensor& chunk_of_full) const override { return chunk_of_full; }
  Tensor forward(nn::Module& model, const Tensor& input) override { return model.forward(input); }
  // Each rank's updated chunk (a view of the whole buffer, so sent from a copy) to every rank.
  void publish() override;
  bool chunks_apart() const override { return false; }

 private:
  ZeroUnits& units_;
  size_t bucket_cap_bytes_;
};

}  // namespace tessera::parallel::zero
