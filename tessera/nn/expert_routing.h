// Which expert each token goes to, and where in the experts' buffer (a mixture of experts'
// dispatch plan, nn/mixture_of_experts.h). Computed on the host from the router's probabilities; no
// autograd: the gates that carry the gradient are read from the probabilities at these choices.
//
// Each token picks its top_k experts (ties to the lower index). Every expert takes at most
// `capacity` tokens (GShard, Switch): first every token's first choice in token order, then every
// token's second choice, and so on, so a token loses its second expert before any token loses its
// first. A choice beyond its expert's capacity is dropped: that expert adds nothing to the token
// (the block's residual still carries it).
#pragma once
#include <cstdint>
#include <vector>

namespace tessera::nn {

struct ExpertRouting {
  int64_t tokens = 0, experts = 0, top_k = 0, capacity = 0;
  // Per (token, choice), token-major: the expert chosen, and the row it takes in the dispatch
  // buffer of experts × capacity rows (expert e's rows are [e·capacity, (e+1)·capacity)), or
  // experts·capacity (one past the end: a zero row) where it was dropped.
  std::vector<int64_t> choice, slot;
  // Per dispatch row: the token in it, or `tokens` (a zero row) where the expert has room left.
  std::vector<int64_t> slot_token;
  std::vector<int64_t> chosen;  // per expert: the choices that named it, dropped ones included
  int64_t dropped = 0;          // choices dropped for capacity
};

// The rows each expert takes from `tokens` tokens: ceil(capacity_factor · tokens · top_k / experts),
// at least 1 (capacity_factor 1: an even spread fits exactly).
int64_t expert_capacity(int64_t tokens, int64_t experts, int64_t top_k, double capacity_factor);

// `probs`: tokens × experts probabilities, row-major.
ExpertRouting route_tokens(const float* probs, int64_t tokens, int64_t experts, int64_t top_k, int64_t capacity);

}  // namespace tessera::nn
