#include "tessera/parallel/context/layout.h"

#include "tessera/core/error.h"

namespace tessera::parallel::context {

ContextAttention context_attention(const std::string& name) {
  if (name == "ring") return ContextAttention::Ring;
  if (name == "ulysses") return ContextAttention::Ulysses;
  throw ValueError("[context parallel] attention '" + name + "': choose ring or ulysses");
}

std::vector<int64_t> context_positions(int part, int parts, int64_t local_tokens, ContextAttention attention) {
  TESSERA_CHECK(parts >= 1 && part >= 0 && part < parts && local_tokens >= 1, "[context parallel] part ", part,
                " of ", parts, " with ", local_tokens, " tokens");
  std::vector<int64_t> positions;
  if (attention == ContextAttention::Ulysses || parts == 1) {
    for (int64_t i = 0; i < local_tokens; ++i) positions.push_back(part * local_tokens + i);
    return positions;
  }
  TESSERA_CHECK(local_tokens % 2 == 0, "[context parallel] ring attention holds two chunks per rank: ", local_tokens,
                " tokens per rank must be even (model.context a multiple of 2·parallel.cp)");
  const int64_t chunk = local_tokens / 2;
  for (int64_t c : {static_cast<int64_t>(part), static_cast<int64_t>(2 * parts - 1 - part)})
    for (int64_t i = 0; i < chunk; ++i) positions.push_back(c * chunk + i);
  return positions;
}

}  // namespace tessera::parallel::context
