// TcpStore: the Store client of a TcpStoreServer (c10d's TCPStore), one TCP connection per
// process. Calls from several threads are serialised on that connection.
//
// Failure behaviour, which process groups build on:
//  - get/wait that outlive their timeout raise TimeoutError naming the op, the keys still
//    missing, this rank and the store's address; the connection stays usable.
//  - A store that goes away (its process died, stop() was called) makes the pending call and every
//    later one raise PeerFailureError naming the store's address, at once rather than at the
//    timeout: a rank that loses its rendezvous cannot recover it and should exit.
//  - A store alive but silent past the timeout raises TimeoutError; the connection is then
//    reopened on the next call, since a late reply would otherwise answer the wrong request.
#pragma once
#include <mutex>

#include "tessera/dist/net/socket.h"
#include "tessera/dist/store/store.h"

namespace tessera::dist {

struct TcpStoreOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 0;   // the server's port; required
  std::string token;   // the job token; required
  int rank = -1;       // only for messages (-1: not a rank, e.g. the launcher)
  Milliseconds timeout{300000};         // default for get/wait and the bound on every other reply
  Milliseconds connect_timeout{60000};  // keep retrying until then: the server may start after us
  size_t max_message_bytes = size_t(64) << 20;  // replies longer than this are treated as corrupt
};

class TcpStore : public Store {
 public:
  // Connects (retrying until connect_timeout) and presents the token. TimeoutError when no server
  // answers in time; ValueError when the server rejects the token.
  explicit TcpStore(TcpStoreOptions options);
  ~TcpStore() override = default;

  using Store::set;
  using Store::wait;
  void set(const std::string& key, const Bytes& value) override;
  Bytes get(const std::string& key) override;  // waits at most timeout()
  int64_t add(const std::string& key, int64_t delta) override;
  Bytes compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) override;
  bool delete_key(const std::string& key) override;
  bool check(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, Milliseconds timeout) override;

  const std::string& address() const { return address_; }  // "host:port" of the server
  int rank() const { return options_.rank; }

 private:
  struct Reply {
    uint8_t opcode = 0;
    Bytes payload;  // the fields after the opcode
  };
  // Sends one request frame and reads its reply before `deadline`, (re)connecting if needed.
  // Throws PeerFailureError / TimeoutError naming `op`. Caller holds mu_.
  Reply call(const char* op, const Bytes& frame, detail::Clock::time_point deadline, const std::string& what);
  void connect_locked();
  bool read_bool(const char* op, const Reply& reply);
  [[noreturn]] void fail_peer(const char* op, const std::string& why);
  [[noreturn]] void fail_protocol(const char* op, const std::string& why);
  // The TimeoutError of a get/wait the server answered with the keys still missing.
  [[noreturn]] void fail_wait_timeout(const char* op, Milliseconds timeout, const std::vector<std::string>& missing);
  std::string me() const;  // "rank 3" for messages

  TcpStoreOptions options_;
  std::string address_;
  std::mutex mu_;
  detail::Socket sock_;
  std::string failure_;  // set once the server is known dead: later calls fail with it at once
};

}  // namespace tessera::dist
