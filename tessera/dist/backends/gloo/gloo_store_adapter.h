// GlooStoreAdapter: our Store seen as a gloo::rendezvous::Store, so that gloo's connectFullMesh
// exchanges its addresses through the group's private store (TcpStore, HashStore, PrefixStore...)
// instead of gloo's own file or Redis stores. Errors stay ours (TimeoutError naming the missing
// keys), which the communicator reports as a failed rendezvous.
#pragma once
#include <memory>

#include <gloo/rendezvous/store.h>

#include "tessera/dist/store/store.h"

namespace tessera::dist {

class GlooStoreAdapter : public gloo::rendezvous::Store {
 public:
  explicit GlooStoreAdapter(std::shared_ptr<dist::Store> store) : store_(std::move(store)) {}

  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override;

 private:
  std::shared_ptr<dist::Store> store_;
};

}  // namespace tessera::dist
