// Store: the key-value rendezvous every process group starts from (the c10d Store). Ranks publish
// addresses and counters here; every wait has a timeout and its error names the keys still missing.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "tessera/dist/bytes.h"

namespace tessera::dist {

class Store {
 public:
  virtual ~Store() = default;
  virtual void set(const std::string& key, const Bytes& value) = 0;
  // Blocks until `key` exists (at most the store's timeout), then returns its value.
  virtual Bytes get(const std::string& key) = 0;
  // Atomically adds `delta` to the integer at `key` (created as 0) and returns the new value. The
  // counter is stored as decimal text, so get() on it reads e.g. "8"; ValueError if `key` holds
  // something else.
  virtual int64_t add(const std::string& key, int64_t delta) = 0;
  // Sets `key` to `desired` if its current value is `expected` (an absent key matches an empty
  // `expected`); returns the value after the operation (empty when the key stays absent).
  virtual Bytes compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) = 0;
  // Returns whether the key existed.
  virtual bool delete_key(const std::string& key) = 0;
  virtual bool check(const std::vector<std::string>& keys) = 0;  // all present, without waiting
  // Blocks until every key exists; TimeoutError naming the missing keys after `timeout`.
  virtual void wait(const std::vector<std::string>& keys, Milliseconds timeout) = 0;
  void wait(const std::vector<std::string>& keys) { wait(keys, timeout_); }
  Milliseconds timeout() const { return timeout_; }
  void set_timeout(Milliseconds timeout) { timeout_ = timeout; }

  void set(const std::string& key, const std::string& value) { set(key, Bytes(value.begin(), value.end())); }
  std::string get_string(const std::string& key) {
    Bytes b = get(key);
    return std::string(b.begin(), b.end());
  }

 protected:
  Milliseconds timeout_{300000};
};

}  // namespace tessera::dist
