// Making gloo contexts: the TCP device (one per process and group tree: split() reuses it) and a
// full mesh of connections set up through a tessera Store.
#pragma once
#include <memory>
#include <string>

#include <gloo/context.h>
#include <gloo/transport/device.h>

#include "tessera/dist/store/store.h"

namespace tessera::dist::detail {

// The address gloo binds and advertises. Loopback when every rank is on this machine (our
// security rule: nothing listens on a public interface unless it must); otherwise
// TESSERA_GLOO_HOST if set, else this machine's hostname.
std::string gloo_bind_host(int local_size, int size);

// A TCP device listening on `host`. Also makes SIGPIPE harmless (see the .cpp).
std::shared_ptr<gloo::transport::Device> make_gloo_device(const std::string& host);

// Connects `rank` of `size` to every other rank, exchanging addresses through `store` (which must
// be private to this mesh: the keys are the rank numbers). `timeout` bounds the rendezvous and is
// the context's default timeout. Errors name "[gloo rendezvous]" and the rank.
std::shared_ptr<gloo::Context> connect_gloo_mesh(const std::shared_ptr<gloo::transport::Device>& device,
                                                 const std::shared_ptr<Store>& store, int rank, int size,
                                                 Milliseconds timeout);

}  // namespace tessera::dist::detail
