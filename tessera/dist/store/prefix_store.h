// PrefixStore: a view of another Store in which every key is "prefix/key", so that subgroups and
// repeated rendezvous rounds share one server without their keys colliding (c10d's PrefixStore).
// Errors name the full key, which is what an operator finds on the server.
#pragma once
#include <memory>

#include "tessera/dist/store/store.h"

namespace tessera::dist {

class PrefixStore : public Store {
 public:
  // The view starts with the inner store's timeout; set_timeout() on the view changes only the
  // view's own wait() default, while get() follows the inner store's timeout.
  PrefixStore(std::string prefix, std::shared_ptr<Store> inner);

  using Store::set;
  using Store::wait;
  void set(const std::string& key, const Bytes& value) override;
  Bytes get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t delta) override;
  Bytes compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) override;
  bool delete_key(const std::string& key) override;
  bool check(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, Milliseconds timeout) override;

  const std::string& prefix() const { return prefix_; }
  const std::shared_ptr<Store>& inner() const { return inner_; }

 private:
  std::string full(const std::string& key) const { return prefix_ + "/" + key; }
  std::vector<std::string> full(const std::vector<std::string>& keys) const;

  std::string prefix_;
  std::shared_ptr<Store> inner_;
};

}  // namespace tessera::dist
