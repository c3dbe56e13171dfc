// Exceptions and check macros. Messages start with "[op]" and name the shapes, rank, peer or file
// involved, so that a user reading only the message knows what to fix.
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>

namespace tessera {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
// A caller mistake: wrong shape, dtype, device, argument or configuration.
class ValueError : public Error { using Error::Error; };
class IndexError : public ValueError { using ValueError::ValueError; };
class IoError : public Error { using Error::Error; };
class TimeoutError : public Error { using Error::Error; };
class PeerFailureError : public Error { using Error::Error; };
class NotSupportedError : public Error { using Error::Error; };
// An allocation refused: past the process's memory budget (cpu_allocator::set_memory_budget) or
// refused by the system. Its own type so that a caller can retry with a smaller batch.
class OutOfMemoryError : public Error { using Error::Error; };
// A bug in tessera itself (TESSERA_ASSERT).
class InternalError : public Error { using Error::Error; };

namespace detail {
template <typename... Args>
std::string concat(const Args&... args) {
  std::ostringstream out;
  (out << ... << args);
  return out.str();
}
}  // namespace detail

}  // namespace tessera

// TESSERA_CHECK(cond, "[op] message ", value, ...) for caller mistakes.
#define TESSERA_CHECK(cond, ...)                                             \
  do {                                                                       \
    if (!(cond)) throw ::tessera::ValueError(::tessera::detail::concat(__VA_ARGS__)); \
  } while (0)

#define TESSERA_CHECK_INDEX(cond, ...)                                       \
  do {                                                                       \
    if (!(cond)) throw ::tessera::IndexError(::tessera::detail::concat(__VA_ARGS__)); \
  } while (0)

// TESSERA_ASSERT for invariants of our own code.
#define TESSERA_ASSERT(cond, ...)                                                        \
  do {                                                                                   \
    if (!(cond))                                                                         \
      throw ::tessera::InternalError(::tessera::detail::concat(                           \
          "internal error at " __FILE__ ":", __LINE__, " (", #cond, "): ", ##__VA_ARGS__)); \
  } while (0)
