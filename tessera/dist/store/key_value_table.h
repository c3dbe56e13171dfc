// The key-value semantics shared by HashStore and the TCP store server, so that every Store
// answers add / compare_set / wait the same way. Not thread-safe: HashStore holds its mutex around
// it and the server touches it only from its poll thread.
#pragma once
#include <string>
#include <unordered_map>
#include <vector>

#include "tessera/dist/store/store.h"

namespace tessera::dist::detail {

class KeyValueTable {
 public:
  void set(const std::string& key, Bytes value) { data_[key] = std::move(value); }
  // nullptr when absent; valid until the next mutation.
  const Bytes* find(const std::string& key) const;
  // Counters are stored as decimal text (as in c10d), so `get` on a counter returns e.g. "8".
  // ValueError (message starting with `op`) when the value is not an integer or the sum overflows.
  int64_t add(const char* op, const std::string& key, int64_t delta);
  // Returns the value after the operation; an absent key that stays absent reads as empty. `changed`
  // tells whether the key was written (waiters may then be woken).
  Bytes compare_set(const std::string& key, const Bytes& expected, const Bytes& desired, bool* changed);
  bool erase(const std::string& key) { return data_.erase(key) > 0; }
  std::vector<std::string> missing(const std::vector<std::string>& keys) const;

 private:
  std::unordered_map<std::string, Bytes> data_;
};

// "a, b, c" for error messages, shortened after the first 16 keys (a world of 1024 ranks would
// otherwise print a page).
std::string format_keys(const std::vector<std::string>& keys);

}  // namespace tessera::dist::detail
