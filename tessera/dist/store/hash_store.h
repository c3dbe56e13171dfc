// HashStore: an in-process Store (a map behind a mutex and a condition variable) for tests and the
// threaded backend, where every "rank" is a thread of one process. The blocking calls honour their
// timeout and name the keys still missing, exactly like TcpStore, so code tested on it behaves the
// same over the wire.
#pragma once
#include <condition_variable>
#include <mutex>

#include "tessera/dist/store/key_value_table.h"
#include "tessera/dist/store/store.h"

namespace tessera::dist {

class HashStore : public Store {
 public:
  HashStore() = default;
  explicit HashStore(Milliseconds timeout) { set_timeout(timeout); }

  using Store::set;
  using Store::wait;
  void set(const std::string& key, const Bytes& value) override;
  Bytes get(const std::string& key) override;  // waits at most timeout()
  int64_t add(const std::string& key, int64_t delta) override;
  Bytes compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) override;
  bool delete_key(const std::string& key) override;
  bool check(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, Milliseconds timeout) override;

 private:
  // Waits with mu_ held (through `lock`) until every key exists; TimeoutError naming `op` otherwise.
  void wait_locked(std::unique_lock<std::mutex>& lock, const char* op, const std::vector<std::string>& keys,
                   Milliseconds timeout);

  std::mutex mu_;
  std::condition_variable changed_;  // notified on every write, so waiters re-check their keys
  detail::KeyValueTable table_;
};

}  // namespace tessera::dist
