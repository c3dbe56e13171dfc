// The few key-value operations the elastic rendezvous needs, over either backend of
// `tessera run --rdzv-backend`: the embedded TcpStore ("store") or etcd's v3 JSON gateway ("etcd").
// None of them waits: the rendezvous polls, so every wait it does is bounded by its own deadline.
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tessera/dist/store/store.h"

namespace tessera::elastic {

class RendezvousStore {
 public:
  virtual ~RendezvousStore() = default;
  // The value of `key`, or nullopt when it is absent (no waiting).
  virtual std::optional<std::string> get(const std::string& key) = 0;
  virtual void set(const std::string& key, const std::string& value) = 0;
  // Atomically adds `delta` to the decimal integer at `key` (absent: 0); returns the new value.
  virtual int64_t add(const std::string& key, int64_t delta) = 0;
  // Sets `key` to `desired` if it holds `expected` ("" matches an absent key); returns the value
  // after the operation, so the caller won the race exactly when that equals `desired`.
  virtual std::string compare_set(const std::string& key, const std::string& expected,
                                  const std::string& desired) = 0;
  virtual std::string describe() const = 0;  // "store at 127.0.0.1:29400", for messages
};

// Over a dist::Store (a TcpStore client of the embedded server).
std::unique_ptr<RendezvousStore> make_store_rendezvous(std::shared_ptr<dist::Store> store, std::string address);
// Over etcd's v3 JSON gateway at http://host:port of each member of an etcd cluster
// (etcd_rendezvous.cpp); keys are put under "/tessera/". A request goes to one member and, when that
// one does not answer, to the next, so the loss of a minority of the members is not the job's.
// IoError when no member can be reached within `timeout`.
std::unique_ptr<RendezvousStore> make_etcd_rendezvous(const std::vector<std::pair<std::string, int>>& members,
                                                      std::chrono::milliseconds timeout);

}  // namespace tessera::elastic
