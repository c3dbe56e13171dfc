// The etcd backend of the rendezvous: etcd's v3 JSON gateway (POST /v3/kv/range, /v3/kv/put,
// /v3/kv/txn; keys and values base64) over plain HTTP/1.1, one short connection per request, with
// a client of our own: a few dozen lines instead of a gRPC stack. Meant for etcd on a trusted
// network or loopback (no TLS, no auth), as the tests run it.
//
// A cluster's members are all given: a request goes to the member that answered last and, when it
// cannot be reached or does not answer in time (its host lost, or cut off from the majority), to
// the next, once round the members. Any member serves every request (etcd forwards writes to its
// leader), so losing a minority of the members costs the job one member's time-out. A transaction
// that committed on a member which died before it replied is sent again to the next, and fails
// there (what it compared has changed). `compare_set` then reads its own value back and wins, as it
// should; `add` (the join counter, whose value is the agent's node rank: counting twice would
// leave a rank unclaimed) writes a marker of its own with the new value in the same transaction,
// and finds it before trying again.
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <random>
#include <poll.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "tessera/core/error.h"
#include "tessera/dist/net/socket.h"
#include "tessera/elastic/etcd_reply.h"
#include "tessera/elastic/rendezvous_store.h"

namespace tessera::elastic {

namespace {

using nlohmann::json;
using tessera::detail::concat;

struct EtcdMember {
  std::string host;
  int port;
};

class EtcdRendezvous : public RendezvousStore {
 public:
  EtcdRendezvous(std::vector<EtcdMember> members, std::chrono::milliseconds timeout)
      : members_(std::move(members)), timeout_(timeout) {
    TESSERA_CHECK(!members_.empty(), "[rendezvous] etcd needs at least one member's HOST:PORT");
    // Fail early, with a message, when nothing answers there.
    const auto deadline = dist::detail::Clock::now() + timeout_;
    std::string error;
    while (true) {
      try {
        post("/v3/kv/range", json{{"key", base64_encode(kPrefix)}});
        return;
      } catch (const IoError& e) {
        if (dist::detail::Clock::now() >= deadline)
          throw IoError(concat("[rendezvous] no etcd answered at ", describe(), " within ", timeout_.count() / 1000.0,
                               " s: ", e.what(), "; is etcd running there?"));
      }
      ::usleep(100000);
    }
  }

  std::optional<std::string> get(const std::string& key) override {
    return first_value(post("/v3/kv/range", json{{"key", base64_encode(kPrefix + key)}}), "/v3/kv/range");
  }

  void set(const std::string& key, const std::string& value) override {
    post("/v3/kv/put", json{{"key", base64_encode(kPrefix + key)}, {"value", base64_encode(value)}});
  }

  int64_t add(const std::string& key, int64_t delta) override {
    const std::string k = base64_encode(kPrefix + key);
    const std::string marker = base64_encode(concat(kPrefix, "ops/", key, "/", random_hex()));
    while (true) {  // optimistic: read, then write only if nobody wrote in between
      json r = post("/v3/kv/range", json{{"key", k}});
      int64_t value = 0;
      json compare;
      if (std::optional<std::string> stored = first_value(r, "/v3/kv/range")) {
        value = parse_counter(*stored, key);
        const json& mod = r["kvs"][0].contains("mod_revision") ? r["kvs"][0]["mod_revision"] : json("0");
        if (!mod.is_string()) throw IoError("[etcd] /v3/kv/range: \"mod_revision\" is not a string");
        compare = {{"key", k}, {"target", "MOD"}, {"result", "EQUAL"}, {"mod_revision", mod}};
      } else {
        compare = {{"key", k}, {"target", "CREATE"}, {"result", "EQUAL"}, {"create_revision", "0"}};
      }
      const std::string next = std::to_string(value + delta);
      json txn = {{"compare", json::array({compare})},
                  {"success", json::array({json{{"request_put", {{"key", k}, {"value", base64_encode(next)}}}},
                                           json{{"request_put", {{"key", marker}, {"value", base64_encode(next)}}}}})}};
      if (succeeded(post("/v3/kv/txn", txn))) return value + delta;
      // Another agent wrote first, or this one did and the reply was lost with its member.
      if (std::optional<std::string> done = first_value(post("/v3/kv/range", json{{"key", marker}}), "/v3/kv/range"))
        return parse_counter(*done, key);
    }
  }

  std::string compare_set(const std::string& key, const std::string& expected, const std::string& desired) override {
    const std::string k = base64_encode(kPrefix + key);
    json compare = expected.empty()
                       ? json{{"key", k}, {"target", "CREATE"}, {"result", "EQUAL"}, {"create_revision", "0"}}
                       : json{{"key", k}, {"target", "VALUE"}, {"result", "EQUAL"}, {"value", base64_encode(expected)}};
    json txn = {{"compare", json::array({compare})},
                {"success", json::array({json{{"request_put", {{"key", k}, {"value", base64_encode(desired)}}}}})},
                {"failure", json::array({json{{"request_range", {{"key", k}}}}})}};
    json r = post("/v3/kv/txn", txn);
    if (succeeded(r)) return desired;
    try {
      return first_value(r.at("responses").at(0).at("response_range"), "/v3/kv/txn").value_or("");
    } catch (const json::exception&) {
      return "";  // the key is absent (the gateway omits empty fields)
    }
  }

  std::string describe() const override {
    std::string text = "etcd at ";
    for (size_t i = 0; i < members_.size(); ++i)
      text += concat(i ? ", " : "", "http://", members_[i].host, ":", members_[i].port);
    return text;
  }

 private:
  static constexpr const char* kPrefix = "/tessera/";
  static constexpr size_t kMaxReplyBytes = size_t{16} << 20;

  // 64 random bits in hex: this add's marker among every agent's.
  static std::string random_hex() {
    std::random_device device;
    const uint64_t bits = (static_cast<uint64_t>(device()) << 32) ^ device();
    char text[17];
    std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(bits));
    return text;
  }

  static bool succeeded(const json& r) {
    auto it = r.is_object() ? r.find("succeeded") : r.end();
    return it != r.end() && it->is_boolean() && it->get<bool>();
  }

  // The request to the member that answered last, then to each of the others; IoError naming every
  // member's failure when none answered.
  json post(const std::string& path, const json& body) {
    std::string failures;
    for (size_t tried = 0; tried < members_.size(); ++tried) {
      const EtcdMember& m = members_[current_];
      try {
        return post_to(m, path, body);
      } catch (const IoError& e) {
        failures += concat(failures.empty() ? "" : "; ", e.what());
        current_ = (current_ + 1) % members_.size();
      }
    }
    throw IoError(failures);
  }

  json post_to(const EtcdMember& m, const std::string& path, const json& body) {
    const std::string& host = m.host;
    const int port = m.port;
    const std::string payload = body.dump();
    const std::string request = concat("POST ", path, " HTTP/1.1\r\nHost: ", host, ":", port,
                                       "\r\nContent-Type: application/json\r\nContent-Length: ", payload.size(),
                                       "\r\nConnection: close\r\n\r\n", payload);
    // With other members to try, a member that does not accept within 2 s, or answer within 5, is
    // taken as lost (a lost host drops packets; nothing refuses them); etcd itself answers a request
    // it cannot serve (no leader) within its own request time-out.
    const auto now = dist::detail::Clock::now();
    const bool others = members_.size() > 1;
    const auto deadline = now + std::chrono::milliseconds(others ? 5000 : 10000);
    const auto connect_deadline = others ? now + std::chrono::milliseconds(2000) : deadline;
    std::string error;
    dist::detail::Socket sock =
        dist::detail::try_connect_tcp(host, static_cast<uint16_t>(port), connect_deadline, &error);
    if (!sock.valid()) throw IoError(concat("[etcd] cannot connect to ", host, ":", port, ": ", error));
    auto sent = dist::detail::send_all(sock.fd(), reinterpret_cast<const uint8_t*>(request.data()), request.size(),
                                       deadline);
    if (sent.status != dist::detail::IoStatus::kOk) throw IoError(concat("[etcd] ", path, ": sending failed"));
    std::string response;
    char buffer[16384];
    while (true) {
      pollfd p{sock.fd(), POLLIN, 0};
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - dist::detail::Clock::now());
      if (left.count() <= 0)
        throw IoError(concat("[etcd] ", host, ":", port, " ", path, ": no reply within ", others ? 5 : 10, " s"));
      int ready = ::poll(&p, 1, static_cast<int>(left.count()));
      if (ready < 0 && errno == EINTR) continue;
      if (ready <= 0) continue;
      ssize_t n = ::read(sock.fd(), buffer, sizeof buffer);
      if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (n <= 0) break;
      response.append(buffer, static_cast<size_t>(n));
      // Rendezvous keys are small; a reply this large is not etcd's answer to us.
      if (response.size() > kMaxReplyBytes)
        throw IoError(concat("[etcd] ", path, ": the reply exceeds ", kMaxReplyBytes >> 20, " MiB; is ", host, ":", port,
                             " an etcd server?"));
    }
    return parse_etcd_reply(response, path);
  }

  std::vector<EtcdMember> members_;
  size_t current_ = 0;  // the member that answered last
  std::chrono::milliseconds timeout_;
};

}  // namespace

std::unique_ptr<RendezvousStore> make_etcd_rendezvous(const std::vector<std::pair<std::string, int>>& members,
                                                      std::chrono::milliseconds timeout) {
  std::vector<EtcdMember> list;
  for (const auto& [host, port] : members) list.push_back({host, port});
  return std::make_unique<EtcdRendezvous>(std::move(list), timeout);
}

}  // namespace tessera::elastic
