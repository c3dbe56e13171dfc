#include "tessera/dist/launcher/free_port.h"

#include <cerrno>
#include <cstring>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "tessera/core/error.h"
#include "tessera/dist/launcher/fd.h"

namespace tessera::dist::launcher {

int pick_free_port(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  int rc = ::getaddrinfo(host.c_str(), "0", &hints, &found);
  TESSERA_CHECK(rc == 0, "[run] cannot resolve --master-addr '", host, "': ", ::gai_strerror(rc));
  std::string last_error = "no address";
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
    detail::Fd fd(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol));
    sockaddr_storage bound{};
    socklen_t length = sizeof bound;
    if (fd.valid() && ::bind(fd.get(), a->ai_addr, a->ai_addrlen) == 0 &&
        ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&bound), &length) == 0) {
      ::freeaddrinfo(found);
      return bound.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port)
                                         : ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
    }
    last_error = std::strerror(errno);
  }
  ::freeaddrinfo(found);
  throw IoError(tessera::detail::concat("[run] cannot bind a port on --master-addr '", host, "': ", last_error,
                                        " (is it an address of this machine?)"));
}

}  // namespace tessera::dist::launcher
