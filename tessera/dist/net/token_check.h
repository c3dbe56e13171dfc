// Comparing a presented job token with the expected one, for every server that checks tokens (the
// rendezvous store, the parameter servers).
#pragma once
#include <cstdint>
#include <string>

namespace tessera::dist::detail {

// Compares without an early exit, so response timing does not reveal how much of a guess matched.
inline bool tokens_equal(const std::string& a, const std::string& b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i) diff |= uint8_t(a[i]) ^ uint8_t(i < b.size() ? b[i] : 0);
  return diff == 0;
}

}  // namespace tessera::dist::detail
