#include "tessera/parallel/context/ulysses.h"

#include "tessera/ops/ops.h"

namespace tessera::parallel::context {

std::array<Tensor, 3> sequence_to_heads(const Tensor& qkv, int64_t heads, dist::ProcessGroup& group,
                                        ExchangeTally* tally) {
  const int64_t n = group.size();
  TESSERA_CHECK(qkv.dim() == 3 && heads > 0 && qkv.shape()[2] % (3 * heads) == 0 && heads % n == 0,
                "[context parallel] expected qkv (B, T/N, 3·heads·d) with heads divisible by the ", n,
                " ranks of the context group, got ", shape_str(qkv.shape()), " and ", heads, " heads on rank ",
                group.rank());
  const int64_t B = qkv.shape()[0], t = qkv.shape()[1], d = qkv.shape()[2] / (3 * heads), h = heads / n;
  // Block j of what this rank sends holds heads [j·h, (j+1)·h) of its tokens: (N, B, t, 3, h, d).
  Tensor send = permute(reshape(qkv, {B, t, 3, n, h, d}), {3, 0, 1, 2, 4, 5});
  Tensor got = all_to_all(reshape(contiguous(send), {n * B, t * 3 * h * d}), group, tally);
  // Block s came from rank s: tokens [s·t, (s+1)·t) of this rank's heads. -> (3, B, h, N·t, d)
  Tensor whole = reshape(permute(reshape(got, {n, B, t, 3, h, d}), {3, 1, 4, 0, 2, 5}), {3, B, h, n * t, d});
  auto part = [&](int64_t i) { return squeeze(slice(whole, 0, i, i + 1), 0); };
  return {part(0), part(1), part(2)};
}

Tensor heads_to_sequence(const Tensor& y, dist::ProcessGroup& group, ExchangeTally* tally) {
  const int64_t n = group.size();
  TESSERA_CHECK(y.dim() == 4 && y.shape()[2] % n == 0, "[context parallel] expected attention output (B, heads/N, "
                "T, d) with T divisible by the ", n, " ranks of the context group, got ", shape_str(y.shape()),
                " on rank ", group.rank());
  const int64_t B = y.shape()[0], h = y.shape()[1], t = y.shape()[2] / n, d = y.shape()[3];
  // Block j goes to rank j: its tokens [j·t, (j+1)·t) of this rank's heads, (N, B, t, h, d).
  Tensor send = permute(reshape(y, {B, h, n, t, d}), {2, 0, 3, 1, 4});
  Tensor got = all_to_all(reshape(contiguous(send), {n * B, t * h * d}), group, tally);
  // Block s holds heads [s·h, (s+1)·h) of this rank's tokens. -> (B, t, N·h·d), head-major as the input was.
  return reshape(permute(reshape(got, {n, B, t, h, d}), {1, 2, 0, 3, 4}), {B, t, n * h * d});
}

}  // namespace tessera::parallel::context
