#include "tessera/parallel/context/layout.h"

#include "tessera/core/error.h"

namespace tessera::parallel::context {

ContextAttention context_attention(const std::string& name) {
  if (name == "ring") return ContextAttention::Ring;
  if (name == "ulysses") return ContextAttention::Ulysses;
  throw ValueError("[context parallel] attention '" + name + "': choose ring or ulysses");
}

std::vector<TokenRun> context_runs(int part, int parts, int64_t local_tokens, ContextAttention attention) {
  TESSERA_CHECK(parts >= 1 && part >= 0 && part < parts && local_tokens >= 1, "[context parallel] part ", part,
                " of ", parts, " with ", local_tokens, " tokens");
  if (attention == ContextAttention::Ulysses || parts == 1) return {{part * local_tokens, local_tokens}};
  TESSERA_CHECK(local_tokens % 2 == 0, "[context parallel] ring attention holds two chunks per rank: ", local_tokens,
                " tokens per rank must be even (model.context a multiple of 2·parallel.cp)");
  const int64_t chunk = local_tokens / 2;
  return {{part * chunk, chunk}, {(2 * parts - 1 - part) * chunk, chunk}};
}

std::vector<int64_t> context_positions(int part, int parts, int64_t local_tokens, ContextAttention attention) {
  std::vector<int64_t> positions;
  for (const TokenRun& run : context_runs(part, parts, local_tokens, attention))
    for (int64_t i = 0; i < run.length; ++i) positions.push_back(run.first_position + i);
  return positions;
}

}  // namespace tessera::parallel::context
