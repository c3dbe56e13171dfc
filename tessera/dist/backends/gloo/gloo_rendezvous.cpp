#include "tessera/dist/backends/gloo/gloo_rendezvous.h"

#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <mutex>

#include <gloo/rendezvous/context.h>
#include <gloo/transport/tcp/device.h>

#include "tessera/core/error.h"
#include "tessera/dist/backends/gloo/gloo_errors.h"
#include "tessera/dist/backends/gloo/gloo_store_adapter.h"
#include "tessera/dist/net/deadline.h"
#include "tessera/dist/net/interface.h"
#include "tessera/util/settings.h"

namespace tessera::dist::detail {

using tessera::detail::concat;

namespace {

// Gloo's TCP pairs write with writev(), which raises SIGPIPE when the peer has closed its socket,
// and SIGPIPE's default action kills the process: a dead peer would take this rank down with it
// instead of surfacing as PeerFailureError. Ignore it, unless the application installed its own
// handler.
void ignore_sigpipe_once() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction current {};
    if (::sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL) {
      struct sigaction ignore {};
      ignore.sa_handler = SIG_IGN;
      ::sigemptyset(&ignore.sa_mask);
      ::sigaction(SIGPIPE, &ignore, nullptr);
    }
  });
}

}  // namespace

std::string gloo_bind_host(int local_size, int size) {
  if (size == 1 || local_size == size) return "127.0.0.1";
  // Gloo crashes on a host name it cannot resolve: it only ever gets an address.
  if (const char* host = env_setting("TESSERA_GLOO_HOST")) return resolve_ipv4(host, "TESSERA_GLOO_HOST");
  return advertised_address();  // net/interface.h: the interface that reaches the master
}

std::shared_ptr<gloo::transport::Device> make_gloo_device(const std::string& host) {
  ignore_sigpipe_once();
  gloo::transport::tcp::attr attr;
  attr.hostname = host;
  try {
    return gloo::transport::tcp::CreateDevice(attr);
  } catch (const std::exception& e) {
    throw Error(concat("[gloo rendezvous] cannot listen on '", host, "': ", classify_gloo_error(e).message,
                       " (set TESSERA_GLOO_HOST to an address of this machine)"));
  }
}

std::shared_ptr<gloo::Context> connect_gloo_mesh(const std::shared_ptr<gloo::transport::Device>& device,
                                                 const std::shared_ptr<Store>& store, int rank, int size,
                                                 Milliseconds timeout) {
  auto context = std::make_shared<gloo::rendezvous::Context>(rank, size);
  context->setTimeout(clamp_timeout(timeout));
  GlooStoreAdapter adapter(store);
  auto device_copy = device;  // connectFullMesh takes a non-const reference
  std::string prefix = concat("[gloo rendezvous] rank ", rank, " of ", size, ": ");
  try {
    context->connectFullMesh(adapter, device_copy);
  } catch (const TimeoutError& e) {
    throw TimeoutError(prefix + e.what());
  } catch (const Error& e) {
    throw Error(prefix + e.what());
  } catch (const std::exception& e) {
    GlooError error = classify_gloo_error(e);
    throw_gloo_failure(error.kind, prefix + error.message);
  }
  return context;
}

}  // namespace tessera::dist::detail
