// Gloo's exceptions as tessera's. Gloo throws gloo::IoException for a timeout and for a dead peer
// alike (and EnforceNotMet for a broken invariant), so the message decides the type:
//   timeouts ("Timed out waiting 1000ms for recv", "Read timeout", "Application timeout caused
//   pair closure")                                                        -> TimeoutError
//   a peer that went away ("Connection closed by peer", "Connection reset by peer",
//   "Connection refused", "Socket closed", "Broken pipe")                 -> PeerFailureError
//   anything else                                                         -> Error
#pragma once
#include <exception>
#include <string>

namespace tessera::dist::detail {

enum class GlooFailure { Timeout, PeerGone, Other };

struct GlooError {
  GlooFailure kind = GlooFailure::Other;
  std::string message;  // gloo's message without its "[/path/file.cc:123] " prefix
};

GlooError classify_gloo_error(const std::exception& error);

// Throws TimeoutError, PeerFailureError or Error with `message`.
[[noreturn]] void throw_gloo_failure(GlooFailure kind, const std::string& message);

}  // namespace tessera::dist::detail
