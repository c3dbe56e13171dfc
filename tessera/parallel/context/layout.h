// Which tokens of each sequence a rank of a context-parallel group holds (parallel.cp = N), one
// rule for the embedding's positions, attention's causal mask and the strategy's cut of each batch.
//   ulysses: a contiguous part, tokens [r·t, (r+1)·t) of rank r (t = T/N).
//   ring:    two chunks of t/2, chunk r and chunk 2N−1−r of the 2N (Megatron's and Llama 3's
//            load balancing): under the causal mask every rank then has the same work.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace tessera::parallel::context {

enum class ContextAttention { Ring, Ulysses };

ContextAttention context_attention(const std::string& name);  // "ring" or "ulysses"; ValueError otherwise

// A run of tokens at consecutive positions of the whole sequence.
struct TokenRun {
  int64_t first_position, length;
};

// The runs, in order, of the `local_tokens` tokens rank `part` of `parts` holds: one for Ulysses
// (or one rank), ring's two chunks otherwise. Ring needs local_tokens even when parts > 1.
std::vector<TokenRun> context_runs(int part, int parts, int64_t local_tokens, ContextAttention attention);
// The same tokens' positions, one by one.
std::vector<int64_t> context_positions(int part, int parts, int64_t local_tokens, ContextAttention attention);

}  // namespace tessera::parallel::context
