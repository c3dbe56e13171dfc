#include "tessera/dist/backends/gloo/gloo_errors.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <string_view>

#include "tessera/core/error.h"

namespace tessera::dist::detail {

namespace {

bool contains_lower(const std::string& text, std::string_view needle) {
  auto it = std::search(text.begin(), text.end(), needle.begin(), needle.end(),
                        [](char a, char b) { return std::tolower(static_cast<unsigned char>(a)) == b; });
  return it != text.end();
}

// GLOO_ERROR_MSG prefixes "[<source path>:<line>] ": where in gloo, not what happened.
std::string strip_location(std::string message) {
  if (message.size() > 2 && message[0] == '[') {
    size_t close = message.find("] ");
    if (close != std::string::npos && message.find(':') < close) message.erase(0, close + 2);
  }
  return message;
}

}  // namespace

GlooError classify_gloo_error(const std::exception& error) {
  GlooError result;
  result.message = strip_location(error.what());
  const std::string& m = result.message;
  // A local timeout closes every pair of the context; later calls on it see this message.
  constexpr std::array<std::string_view, 2> kLocalTimeout = {"application timeout", "timed out"};
  constexpr std::array<std::string_view, 7> kPeerGone = {"closed by peer",   "reset by peer", "connection refused",
                                                         "socket closed",    "unexpectedly closed",
                                                         "broken pipe",      "connection reset"};
  auto any_of = [&](const auto& needles) {
    return std::any_of(needles.begin(), needles.end(), [&](std::string_view n) { return contains_lower(m, n); });
  };
  if (any_of(kLocalTimeout)) {
    result.kind = GlooFailure::Timeout;
  } else if (any_of(kPeerGone)) {
    result.kind = GlooFailure::PeerGone;
  } else if (contains_lower(m, "timeout")) {  // "Read timeout", "Connect timeout", "Wait timeout for key(s)"
    result.kind = GlooFailure::Timeout;
  }
  return result;
}

void throw_gloo_failure(GlooFailure kind, const std::string& message) {
  switch (kind) {
    case GlooFailure::Timeout: throw TimeoutError(message);
    case GlooFailure::PeerGone: throw PeerFailureError(message);
    case GlooFailure::Other: break;
  }
  throw Error(message);
}

}  // namespace tessera::dist::detail
