#include "tessera/parallel/context/ring_attention.h"

#include <chrono>
#include <cmath>
#include <optional>

#include "tessera/autograd/node.h"
#include "tessera/ops/ops.h"

namespace tessera::parallel::context {
namespace {

constexpr float kMasked = -1e30f;
// Point-to-point tags of the ring's three kinds of message (one group carries only these).
constexpr int kForwardBlocks = 1 << 20, kBackwardBlocks = 2 << 20, kBackwardGradients = 3 << 20;

// (t_q, t_k), added to the scores: 0 where the key is at or before the query, kMasked after.
Tensor causal_mask(const std::vector<int64_t>& queries, const std::vector<int64_t>& keys, Device device) {
  std::vector<float> mask(queries.size() * keys.size());
  for (size_t i = 0; i < queries.size(); ++i)
    for (size_t j = 0; j < keys.size(); ++j) mask[i * keys.size() + j] = keys[j] <= queries[i] ? 0.0f : kMasked;
  Tensor t = from_vector(mask, {static_cast<int64_t>(queries.size()), static_cast<int64_t>(keys.size())});
  return device.is_cpu() ? t : t.to(device);
}

Tensor part(const Tensor& packed, int64_t i) { return squeeze(slice(packed, 0, i, i + 1), 0); }

// One hop of the ring: `mine` to the next rank, the previous rank's into `incoming`.
class RingHop {
 public:
  RingHop(const Tensor& mine, dist::ProcessGroup& group, int tag, ExchangeTally* tally)
      : incoming_(Tensor::empty(mine.shape(), mine.dtype(), mine.device())), tally_(tally) {
    const int n = group.size(), r = group.rank();
    recv_ = group.recv(incoming_, (r + n - 1) % n, tag);
    send_ = group.send(mine, (r + 1) % n, tag);
    bytes_ = static_cast<int64_t>(mine.numel() * dtype_size(mine.dtype()));
  }
  // Waits for both ends; what is still to wait here is the communication compute did not hide.
  Tensor arrived() {
    const auto start = std::chrono::steady_clock::now();
    send_->wait();
    recv_->wait();
    if (tally_) {
      tally_->seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      tally_->bytes += bytes_;
      ++tally_->calls;
    }
    return incoming_;
  }

 private:
  Tensor incoming_;
  dist::WorkPtr recv_, send_;
  int64_t bytes_ = 0;
  ExchangeTally* tally_;
};

Tensor scaled_scores(const Tensor& q, const Tensor& k, float scale, const Tensor& mask) {
  return add(mul(matmul(q, transpose(k, 2, 3)), scale), mask);
}

}  // namespace

Tensor ring_attention(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in,
                      std::vector<std::vector<int64_t>> positions, dist::ProcessGroup& group, ExchangeTally* tally) {
  const int n = group.size(), r = group.rank();
  TESSERA_CHECK(q_in.dim() == 4 && q_in.shape() == k_in.shape() && q_in.shape() == v_in.shape() &&
                    static_cast<int>(positions.size()) == n &&
                    static_cast<int64_t>(positions[r].size()) == q_in.shape()[2],
                "[ring attention] expected q, k, v (B, H, t, d) of one shape and the positions of each of the ", n,
                " ranks' t tokens, got ", shape_str(q_in.shape()), ", ", shape_str(k_in.shape()), ", ",
                shape_str(v_in.shape()), " on rank ", r);
  const float scale = 1.0f / std::sqrt(static_cast<float>(q_in.shape()[3]));
  const Device device = q_in.device();
  Tensor q, own_blocks, out, lse;
  {
    NoGradGuard no_grad;
    q = contiguous(q_in);
    own_blocks = contiguous(stack({k_in, v_in}, 0));  // (2, B, H, t, d): what travels
    Tensor blocks = own_blocks, m, l, o;
    for (int s = 0; s < n; ++s) {
      const int source = (r + n - s) % n;  // whose keys this rank holds at step s
      std::optional<RingHop> hop;
      if (s + 1 < n) hop.emplace(blocks, group, kForwardBlocks + s, tally);  // the next block, while this one computes
      Tensor scores = scaled_scores(q, part(blocks, 0), scale, causal_mask(positions[r], positions[source], device));
      Tensor block_max = max(scores, 3, true).values;
      if (s == 0) {
        m = block_max;
        Tensor p = exp(sub(scores, m));
        l = sum(p, {3}, true);
        o = matmul(p, part(blocks, 1));
      } else {
        Tensor m_new = where(gt(sub(block_max, m), 0.0f), block_max, m);
        Tensor rescale = exp(sub(m, m_new));
        Tensor p = exp(sub(scores, m_new));
        l = add(mul(l, rescale), sum(p, {3}, true));
        o = add(mul(o, rescale), matmul(p, part(blocks, 1)));
        m = m_new;
      }
      if (hop) blocks = hop->arrived();
    }
    out = div(o, l);
    lse = add(m, log(l));  // (B, H, t, 1)
  }
  dist::ProcessGroup* g = &group;
  return autograd::record(out, "RingAttentionBackward", {q_in, k_in, v_in},
                          [g, q, own_blocks, out, lse, positions, scale, device, tally](const Tensor& grad) {
    NoGradGuard no_grad;
    const int n = g->size(), r = g->rank();
    Tensor d_out = contiguous(grad);
    Tensor delta = sum(mul(d_out, out), {3}, true);  // rowsum(dO ∘ O), (B, H, t, 1)
    Tensor dq = zeros_like(q);
    Tensor blocks = own_blocks;
    Tensor block_grads = zeros_like(own_blocks);  // dK, dV of the block held, travelling with it
    for (int s = 0; s < n; ++s) {
      const int source = (r + n - s) % n;
      std::optional<RingHop> hop;
      if (s + 1 < n) hop.emplace(blocks, *g, kBackwardBlocks + s, tally);
      Tensor k = part(blocks, 0), v = part(blocks, 1);
      Tensor p = exp(sub(scaled_scores(q, k, scale, causal_mask(positions[r], positions[source], device)), lse));
      Tensor dv = matmul(transpose(p, 2, 3), d_out);
      Tensor ds = mul(p, sub(matmul(d_out, transpose(v, 2, 3)), delta));
      dq = add(dq, mul(matmul(ds, k), scale));
      Tensor dk = mul(matmul(transpose(ds, 2, 3), q), scale);
      block_grads = add(block_grads, stack({dk, dv}, 0));
      // The gradients go on with their block (after n hops they are home: the last hop takes them there).
      if (n > 1) block_grads = RingHop(block_grads, *g, kBackwardGradients + s, tally).arrived();
      if (hop) blocks = hop->arrived();
    }
    return std::vector<Tensor>{dq, part(block_grads, 0), part(block_grads, 1)};
  }, autograd::Saves::Nothing);
}

}  // namespace tessera::parallel::context
