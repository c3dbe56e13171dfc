#include "tessera/dist/net/interface.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "tessera/core/error.h"
#include "tessera/dist/launcher/env.h"
#include "tessera/dist/net/socket.h"
#include "tessera/util/settings.h"

namespace tessera::dist::detail {

namespace {

std::string to_string(const in_addr& address) {
  char text[INET_ADDRSTRLEN] = {};
  ::inet_ntop(AF_INET, &address, text, sizeof text);
  return text;
}

std::string list_interfaces() {
  std::string out;
  for (const auto& [name, address] : ipv4_interfaces()) out += (out.empty() ? "" : ", ") + name + " " + address;
  return out.empty() ? std::string("none") : out;
}

}  // namespace

std::vector<std::pair<std::string, std::string>> ipv4_interfaces() {
  std::vector<std::pair<std::string, std::string>> out;
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return out;
  for (ifaddrs* i = list; i != nullptr; i = i->ifa_next)
    if (i->ifa_addr != nullptr && i->ifa_addr->sa_family == AF_INET)
      out.emplace_back(i->ifa_name, to_string(reinterpret_cast<const sockaddr_in*>(i->ifa_addr)->sin_addr));
  ::freeifaddrs(list);
  return out;
}

std::string address_of_interface(const std::string& name) {
  for (const auto& [interface, address] : ipv4_interfaces())
    if (interface == name) return address;
  throw ValueError("[network] TESSERA_SOCKET_IFNAME=" + name + ": this machine has no interface of that name with an "
                   "IPv4 address (interfaces: " + list_interfaces() + ")");
}

std::string resolve_ipv4(const std::string& host, const std::string& what) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int rc = ::getaddrinfo(host.c_str(), nullptr, &hints, &found);
  if (rc != 0 || found == nullptr)
    throw Error("[network] " + what + " '" + host + "' does not resolve to an IPv4 address (" + ::gai_strerror(rc) +
                "); give an address, or set TESSERA_SOCKET_IFNAME to the interface to use (interfaces here: " +
                list_interfaces() + ")");
  const std::string address = to_string(reinterpret_cast<const sockaddr_in*>(found->ai_addr)->sin_addr);
  ::freeaddrinfo(found);
  return address;
}

std::string address_towards(const std::string& host) {
  const std::string target = resolve_ipv4(host, "the master address");
  Socket probe(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!probe.valid()) throw Error(std::string("[network] socket(): ") + std::strerror(errno));
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(9);  // any port: connecting a UDP socket sends nothing
  ::inet_pton(AF_INET, target.c_str(), &to.sin_addr);
  if (::connect(probe.fd(), reinterpret_cast<const sockaddr*>(&to), sizeof to) != 0)
    throw Error("[network] no route from this machine to the master " + host + " (" + target + "): " +
                std::strerror(errno) + "; check the address, or set TESSERA_SOCKET_IFNAME (interfaces here: " +
                list_interfaces() + ")");
  sockaddr_in mine{};
  socklen_t length = sizeof mine;
  if (::getsockname(probe.fd(), reinterpret_cast<sockaddr*>(&mine), &length) != 0)
    throw Error(std::string("[network] getsockname(): ") + std::strerror(errno));
  return to_string(mine.sin_addr);
}

std::string advertised_address() {
  if (const char* name = env_setting("TESSERA_SOCKET_IFNAME")) return address_of_interface(name);
  if (auto master = launcher::master_addr_from_environment()) return address_towards(master->c_str());
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0 || name[0] == '\0')
    throw Error("[network] cannot read this machine's hostname; set TESSERA_SOCKET_IFNAME to the interface the other "
                "hosts reach (interfaces here: " + list_interfaces() + ")");
  return resolve_ipv4(name, "this machine's hostname");
}

std::string listen_address(const std::string& peer_host, const std::string& what) {
  if (resolve_ipv4(peer_host, what).rfind("127.", 0) == 0) return "127.0.0.1";
  if (const char* name = env_setting("TESSERA_SOCKET_IFNAME")) return address_of_interface(name);
  return address_towards(peer_host);
}

}  // namespace tessera::dist::detail
