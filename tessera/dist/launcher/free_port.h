// Picks MASTER_PORT when the user gave none (node 0 only).
#pragma once
#include <string>

namespace tessera::dist::launcher {

// Binds port 0 on `host` (a name or an IPv4/IPv6 address), reads the port the kernel chose, and
// releases it. Another process could take it before the store binds it, so when the store is
// hosted by the launcher it should bind port 0 itself; this is for when it is not. ValueError if
// `host` does not resolve, IoError if nothing can be bound.
int pick_free_port(const std::string& host);

}  // namespace tessera::dist::launcher
