#include "tessera/dist/store/hash_store.h"

#include "tessera/core/error.h"
#include "tessera/dist/net/deadline.h"

namespace tessera::dist {

void HashStore::set(const std::string& key, const Bytes& value) {
  {
    std::lock_guard lock(mu_);
    table_.set(key, value);
  }
  changed_.notify_all();
}

Bytes HashStore::get(const std::string& key) {
  std::unique_lock lock(mu_);
  wait_locked(lock, "HashStore::get", {key}, timeout());
  return *table_.find(key);
}

int64_t HashStore::add(const std::string& key, int64_t delta) {
  int64_t result;
  {
    std::lock_guard lock(mu_);
    result = table_.add("HashStore::add", key, delta);
  }
  changed_.notify_all();
  return result;
}

Bytes HashStore::compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) {
  bool changed = false;
  Bytes result;
  {
    std::lock_guard lock(mu_);
    result = table_.compare_set(key, expected, desired, &changed);
  }
  if (changed) changed_.notify_all();
  return result;
}

bool HashStore::delete_key(const std::string& key) {
  std::lock_guard lock(mu_);
  return table_.erase(key);
}

bool HashStore::check(const std::vector<std::string>& keys) {
  std::lock_guard lock(mu_);
  return table_.missing(keys).empty();
}

void HashStore::wait(const std::vector<std::string>& keys, Milliseconds timeout) {
  std::unique_lock lock(mu_);
  wait_locked(lock, "HashStore::wait", keys, timeout);
}

void HashStore::wait_locked(std::unique_lock<std::mutex>& lock, const char* op,
                            const std::vector<std::string>& keys, Milliseconds timeout) {
  auto deadline = detail::deadline_after(timeout);
  bool present = changed_.wait_until(lock, deadline, [&] { return table_.missing(keys).empty(); });
  if (present) return;
  throw TimeoutError(tessera::detail::concat("[", op, "] timed out after ", timeout.count(),
                                    " ms waiting for keys: ", detail::format_keys(table_.missing(keys))));
}

}  // namespace tessera::dist
