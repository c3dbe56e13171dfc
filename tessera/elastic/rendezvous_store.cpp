#include "tessera/elastic/rendezvous_store.h"

namespace tessera::elastic {

namespace {

class StoreRendezvous : public RendezvousStore {
 public:
  StoreRendezvous(std::shared_ptr<dist::Store> store, std::string address)
      : store_(std::move(store)), address_(std::move(address)) {}

  std::optional<std::string> get(const std::string& key) override {
    // The rendezvous never deletes keys, so a key check() saw is still there for get().
    if (!store_->check({key})) return std::nullopt;
    return store_->get_string(key);
  }
  void set(const std::string& key, const std::string& value) override { store_->set(key, value); }
  int64_t add(const std::string& key, int64_t delta) override { return store_->add(key, delta); }
  std::string compare_set(const std::string& key, const std::string& expected, const std::string& desired) override {
    dist::Bytes after = store_->compare_set(key, dist::Bytes(expected.begin(), expected.end()),
                                            dist::Bytes(desired.begin(), desired.end()));
    return std::string(after.begin(), after.end());
  }
  std::string describe() const override { return "store at " + address_; }

 private:
  std::shared_ptr<dist::Store> store_;
  std::string address_;
};

}  // namespace

std::unique_ptr<RendezvousStore> make_store_rendezvous(std::shared_ptr<dist::Store> store, std::string address) {
  return std::make_unique<StoreRendezvous>(std::move(store), std::move(address));
}

}  // namespace tessera::elastic
