#include "tessera/dist/store/prefix_store.h"

#include "tessera/core/error.h"

namespace tessera::dist {

PrefixStore::PrefixStore(std::string prefix, std::shared_ptr<Store> inner)
    : prefix_(std::move(prefix)), inner_(std::move(inner)) {
  TESSERA_CHECK(inner_ != nullptr, "[PrefixStore] prefix '", prefix_, "' needs an inner store, got null");
  set_timeout(inner_->timeout());
}

std::vector<std::string> PrefixStore::full(const std::vector<std::string>& keys) const {
  std::vector<std::string> out;
  out.reserve(keys.size());
  for (const auto& k : keys) out.push_back(full(k));
  return out;
}

void PrefixStore::set(const std::string& key, const Bytes& value) { inner_->set(full(key), value); }
Bytes PrefixStore::get(const std::string& key) { return inner_->get(full(key)); }
int64_t PrefixStore::add(const std::string& key, int64_t delta) { return inner_->add(full(key), delta); }
Bytes PrefixStore::compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) {
  return inner_->compare_set(full(key), expected, desired);
}
bool PrefixStore::delete_key(const std::string& key) { return inner_->delete_key(full(key)); }
bool PrefixStore::check(const std::vector<std::string>& keys) { return inner_->check(full(keys)); }
void PrefixStore::wait(const std::vector<std::string>& keys, Milliseconds timeout) {
  inner_->wait(full(keys), timeout);
}

}  // namespace tessera::dist
