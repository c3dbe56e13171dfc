#include "tessera/dist/call_text.h"

#include <algorithm>

#include "tessera/core/error.h"

namespace tessera::dist {

std::string CallText::description(uint64_t sequence) const {
  if (!numbered) return signature;
  // The signature is "<op> (<details>)"; the number goes between them.
  return tessera::detail::concat(op, " #", sequence, signature.substr(std::min(op.size(), signature.size())));
}

}  // namespace tessera::dist
