#include "tessera/parallel/zero/replicated_parameters.h"

#include <numeric>

#include "tessera/ops/ops.h"
#include "tessera/parallel/ddp/bucket.h"

namespace tessera::parallel::zero {

std::vector<std::vector<size_t>> ReplicatedParameters::group_parameters(nn::Module&, const ZeroUnits& units) {
  std::vector<size_t> bytes, reverse(units.params.size());
  for (const auto& [name, p] : units.params) bytes.push_back(static_cast<size_t>(p.numel()) * 4);
  std::iota(reverse.rbegin(), reverse.rend(), size_t{0});
  return ddp::assign_buckets(reverse, bytes, bucket_cap_bytes_, bucket_cap_bytes_);
}

std::vector<size_t> ReplicatedParameters::gradient_order(size_t unit_count) const {
  std::vector<size_t> order(unit_count);
  std::iota(order.begin(), order.end(), size_t{0});  // the buckets are in reverse order already
  return order;
}

void ReplicatedParameters::publish() {
  autograd::NoGradGuard no_grad;
  std::vector<Tensor> sent(units_.units.size());
  std::vector<dist::WorkPtr> works(units_.units.size());
  for (size_t u = 0; u < units_.units.size(); ++u) {
    sent[u] = clone(units_.shard[u]);
    works[u] = units_.group->allgather(sent[u], units_.full[u]);
    units_.bytes_communicated += bytes_of(sent[u]) * (units_.world - 1);
  }
  for (size_t u = 0; u < units_.units.size(); ++u) works[u]->wait();
}

}  // namespace tessera::parallel::zero
