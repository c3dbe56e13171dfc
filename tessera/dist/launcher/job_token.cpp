#include "tessera/dist/launcher/job_token.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <unistd.h>

#include "tessera/core/error.h"
#include "tessera/dist/launcher/fd.h"

namespace tessera::dist::launcher {

std::string random_job_token() {
  // /dev/urandom rather than std::random_device: the token is a secret and must come from the
  // kernel's CSPRNG, whatever the standard library implements random_device with.
  detail::Fd fd(::open("/dev/urandom", O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) throw IoError(tessera::detail::concat("[run] cannot open /dev/urandom: ", std::strerror(errno)));
  unsigned char bytes[16];
  size_t got = 0;
  while (got < sizeof bytes) {
    ssize_t n = ::read(fd.get(), bytes + got, sizeof bytes - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw IoError(tessera::detail::concat("[run] cannot read /dev/urandom: ", std::strerror(errno)));
    got += static_cast<size_t>(n);
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string token;
  for (unsigned char b : bytes) {
    token += kHex[b >> 4];
    token += kHex[b & 15];
  }
  return token;
}

}  // namespace tessera::dist::launcher
