// The store side of the launcher's environment contract: a worker started by `tessera run` finds
// the store at MASTER_ADDR:MASTER_PORT and presents TESSERA_JOB_TOKEN, as RANK.
#pragma once
#include <memory>

#include "tessera/dist/store/store.h"

namespace tessera::dist {

// A TcpStore connected to MASTER_ADDR:MASTER_PORT with TESSERA_JOB_TOKEN, as RANK; `timeout` bounds
// both the connection attempts and every later get/wait. ValueError naming the variable when one
// is missing or malformed.
std::shared_ptr<Store> store_from_env(Milliseconds timeout);
// The same for a process of the job that is not a rank (a parameter server): `rank` only names it
// in the store's logs, and RANK is not read.
std::shared_ptr<Store> store_from_env(Milliseconds timeout, int rank);

}  // namespace tessera::dist
