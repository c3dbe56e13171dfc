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

// A run of a rank's tokens (layout.h) and the rows [at, at + length) it takes of the rank's t.
struct Run {
  int64_t at, length, first_position;
};

std::vector<Run> rows_of(const std::vector<TokenRun>& runs) {
  std::vector<Run> rows;
  int64_t at = 0;
  for (const TokenRun& run : runs) {
    rows.push_back({at, run.length, run.first_position});
    at += run.length;
  }
  return rows;
}

// How a run of queries sees a run of keys under the causal mask: not at all, every key, or the same
// run of positions (its lower triangle). The layouts' runs never overlap otherwise.
enum class Sight { None, All, Diagonal };

Sight sight(const Run& q, const Run& k) {
  if (k.first_position > q.first_position + q.length - 1) return Sight::None;
  if (k.first_position + k.length - 1 <= q.first_position) return Sight::All;
  TESSERA_CHECK(k.first_position == q.first_position && k.length == q.length, "[ring attention] runs of queries ",
                "and keys that overlap without being the same tokens (positions ", q.first_position, "+", q.length,
                " and ", k.first_position, "+", k.length, ")");
  return Sight::Diagonal;
}

// (n, n) added to a diagonal block's scores: kMasked above the diagonal.
Tensor upper_mask(int64_t n, Device device) {
  std::vector<float> mask(n * n, 0.0f);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = i + 1; j < n; ++j) mask[i * n + j] = kMasked;
  Tensor t = from_vector(mask, {n, n});
  return device.is_cpu() ? t : t.to(device);
}

Tensor part(const Tensor& packed, int64_t i) { return squeeze(slice(packed, 0, i, i + 1), 0); }
Tensor rows(const Tensor& t, const Run& run) { return slice(t, 2, run.at, run.at + run.length); }

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

// The scores of a run of queries against a run of keys, scaled, masked on the diagonal.
Tensor block_scores(const Tensor& q, const Tensor& k, float scale, Sight seen, const Tensor& diagonal_mask) {
  Tensor s = mul(matmul(q, transpose(k, 2, 3)), scale);
  return seen == Sight::Diagonal ? add(s, diagonal_mask) : s;
}

// The online softmax's running state of one run of queries.
struct Running {
  Tensor m, l, o;  // row maximum, row sum of exp(score - m), Σ exp(score - m)·v
  void fold(const Tensor& scores, const Tensor& v) {
    Tensor block_max = max(scores, 3, true).values;
    if (!m.defined()) {
      m = block_max;
      Tensor p = exp(sub(scores, m));
      l = sum(p, {3}, true);
      o = matmul(p, v);
      return;
    }
    Tensor m_new = where(gt(sub(block_max, m), 0.0f), block_max, m);
    Tensor rescale = exp(sub(m, m_new));
    Tensor p = exp(sub(scores, m_new));
    l = add(mul(l, rescale), sum(p, {3}, true));
    o = add(mul(o, rescale), matmul(p, v));
    m = m_new;
  }
};

}  // namespace

Tensor ring_attention(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in,
                      const std::vector<std::vector<TokenRun>>& token_runs, dist::ProcessGroup& group,
                      ExchangeTally* tally) {
  const int n = group.size(), r = group.rank();
  std::vector<std::vector<Run>> runs;
  for (const auto& rank_runs : token_runs) runs.push_back(rows_of(rank_runs));
  TESSERA_CHECK(q_in.dim() == 4 && q_in.shape() == k_in.shape() && q_in.shape() == v_in.shape() &&
                    static_cast<int>(runs.size()) == n && !runs[r].empty() &&
                    runs[r].back().at + runs[r].back().length == q_in.shape()[2],
                "[ring attention] expected q, k, v (B, H, t, d) of one shape and the runs of each of the ", n,
                " ranks' t tokens, got ", shape_str(q_in.shape()), ", ", shape_str(k_in.shape()), ", ",
                shape_str(v_in.shape()), " on rank ", r);
  const float scale = 1.0f / std::sqrt(static_cast<float>(q_in.shape()[3]));
  const std::vector<Run>& mine = runs[r];
  // Every diagonal block is a run of this rank against itself: one mask per run length.
  std::vector<Tensor> diagonal;
  for (const Run& run : mine) diagonal.push_back(upper_mask(run.length, q_in.device()));
  Tensor q, own_blocks, out, lse;
  {
    NoGradGuard no_grad;
    q = contiguous(q_in);
    own_blocks = contiguous(stack({k_in, v_in}, 0));  // (2, B, H, t, d): what travels
    std::vector<Running> running(mine.size());
    Tensor blocks = own_blocks;
    for (int s = 0; s < n; ++s) {
      const int source = (r + n - s) % n;  // whose keys this rank holds at step s
      std::optional<RingHop> hop;
      if (s + 1 < n) hop.emplace(blocks, group, kForwardBlocks + s, tally);  // the next block, while this one computes
      Tensor k = part(blocks, 0), v = part(blocks, 1);
      for (size_t a = 0; a < mine.size(); ++a)
        for (const Run& key_run : runs[source]) {
          const Sight seen = sight(mine[a], key_run);
          if (seen == Sight::None) continue;  // half of every later step under the two-chunk layout
          running[a].fold(block_scores(rows(q, mine[a]), rows(k, key_run), scale, seen, diagonal[a]),
                          rows(v, key_run));
        }
      if (hop) blocks = hop->arrived();
    }
    std::vector<Tensor> outs, lses;
    for (const Running& run : running) {
      outs.push_back(div(run.o, run.l));
      lses.push_back(add(run.m, log(run.l)));
    }
    out = outs.size() == 1 ? outs[0] : cat(outs, 2);
    lse = lses.size() == 1 ? lses[0] : cat(lses, 2);  // (B, H, t, 1)
  }
  dist::ProcessGroup* g = &group;
  return autograd::record(out, "RingAttentionBackward", {q_in, k_in, v_in},
                          [g, q, own_blocks, out, lse, runs, diagonal, scale, tally](const Tensor& grad) {
    NoGradGuard no_grad;
    const int n = g->size(), r = g->rank();
    const std::vector<Run>& mine = runs[r];
    Tensor d_out = contiguous(grad);
    Tensor delta = sum(mul(d_out, out), {3}, true);  // rowsum(dO ∘ O), (B, H, t, 1)
    std::vector<Tensor> dq(mine.size());
    Tensor blocks = own_blocks;
    Tensor block_grads = zeros_like(own_blocks);  // dK, dV of the block held, travelling with it
    for (int s = 0; s < n; ++s) {
      const int source = (r + n - s) % n;
      std::optional<RingHop> hop;
      if (s + 1 < n) hop.emplace(blocks, *g, kBackwardBlocks + s, tally);
      Tensor k = part(blocks, 0), v = part(blocks, 1);
      std::vector<Tensor> dk_runs, dv_runs;
      for (const Run& key_run : runs[source]) {
        Tensor dk, dv;
        for (size_t a = 0; a < mine.size(); ++a) {
          const Sight seen = sight(mine[a], key_run);
          if (seen == Sight::None) continue;
          Tensor qa = rows(q, mine[a]), kb = rows(k, key_run), vb = rows(v, key_run), dout_a = rows(d_out, mine[a]);
          Tensor p = exp(sub(block_scores(qa, kb, scale, seen, diagonal[a]), rows(lse, mine[a])));
          Tensor ds = mul(p, sub(matmul(dout_a, transpose(vb, 2, 3)), rows(delta, mine[a])));
          Tensor dq_part = mul(matmul(ds, kb), scale);
          dq[a] = dq[a].defined() ? add(dq[a], dq_part) : dq_part;
          Tensor dk_part = mul(matmul(transpose(ds, 2, 3), qa), scale), dv_part = matmul(transpose(p, 2, 3), dout_a);
          dk = dk.defined() ? add(dk, dk_part) : dk_part;
          dv = dv.defined() ? add(dv, dv_part) : dv_part;
        }
        dk_runs.push_back(dk.defined() ? dk : zeros_like(rows(k, key_run)));
        dv_runs.push_back(dv.defined() ? dv : zeros_like(rows(v, key_run)));
      }
      Tensor dk = dk_runs.size() == 1 ? dk_runs[0] : cat(dk_runs, 2), dv = dv_runs.size() == 1 ? dv_runs[0] : cat(dv_runs, 2);
      block_grads = add(block_grads, stack({dk, dv}, 0));
      // The gradients go on with their block (after n hops they are home: the last hop takes them there).
      if (n > 1) block_grads = RingHop(block_grads, *g, kBackwardGradients + s, tally).arrived();
      if (hop) blocks = hop->arrived();
    }
    for (size_t a = 0; a < mine.size(); ++a)
      if (!dq[a].defined()) dq[a] = zeros_like(rows(q, mine[a]));
    return std::vector<Tensor>{dq.size() == 1 ? dq[0] : cat(dq, 2), part(block_grads, 0), part(block_grads, 1)};
  }, autograd::Saves::Nothing);
}

}  // namespace tessera::parallel::context
