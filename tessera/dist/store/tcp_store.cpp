#include "tessera/dist/store/tcp_store.h"

#include <thread>

#include "tessera/core/error.h"
#include "tessera/dist/store/key_value_table.h"
#include "tessera/dist/store/tcp_store_protocol.h"

namespace tessera::dist {

namespace {

using detail::Clock;
using detail::FrameReader;
using detail::FrameWriter;
using detail::StoreOp;
using detail::StoreReply;
using tessera::detail::concat;

// get/wait carry their timeout and the server answers kTimeout itself, on time. The client waits
// this much longer before deciding the server has gone silent.
constexpr Milliseconds kReplyGrace{2000};
// Connection retries back off from 10 ms to 1 s: fast when the server is a moment late, gentle on
// it when a thousand ranks are all retrying.
constexpr Milliseconds kFirstBackoff{10};
constexpr Milliseconds kMaxBackoff{1000};

}  // namespace

TcpStore::TcpStore(TcpStoreOptions options) : options_(std::move(options)) {
  address_ = detail::format_address(options_.host, options_.port);
  TESSERA_CHECK(!options_.token.empty(), "[TcpStore] ", me(), ": the job token is empty; every process of a job "
                "must present the launcher's token (TESSERA_JOB_TOKEN) to the store at ", address_);
  TESSERA_CHECK(options_.port != 0, "[TcpStore] ", me(), ": port 0 is not a server port; pass the port the "
                "TcpStoreServer reports (MASTER_PORT)");
  set_timeout(options_.timeout);
  std::lock_guard lock(mu_);
  connect_locked();
}

std::string TcpStore::me() const { return options_.rank >= 0 ? concat("rank ", options_.rank) : "client"; }

void TcpStore::connect_locked() {
  auto deadline = detail::deadline_after(options_.connect_timeout);
  auto backoff = kFirstBackoff;
  std::string error;
  for (;;) {
    detail::Socket s = detail::try_connect_tcp(options_.host, options_.port, deadline, &error);
    if (s.valid()) {
      detail::set_nodelay(s.fd());
      sock_ = std::move(s);
      break;
    }
    auto left = deadline - Clock::now();
    if (left <= Clock::duration::zero())
      throw TimeoutError(concat("[TcpStore] ", me(), " could not connect to the store at ", address_, " within ",
                                options_.connect_timeout.count(), " ms: ", error,
                                "; is the launcher (or rank 0) running, and are MASTER_ADDR/MASTER_PORT right?"));
    std::this_thread::sleep_for(std::min<Clock::duration>(backoff, left));
    backoff = std::min(backoff * 2, kMaxBackoff);
  }
  Bytes hello = FrameWriter(uint8_t(StoreOp::kHello))
                    .u32(detail::kStoreProtocolVersion)
                    .i64(options_.rank)
                    .str(options_.token)
                    .finish();
  Milliseconds budget = detail::clamp_timeout(options_.timeout);
  Reply reply = call("TcpStore::connect", hello, Clock::now() + budget, "the hello");
  if (reply.opcode == uint8_t(StoreReply::kOk)) return;
  if (reply.opcode != uint8_t(StoreReply::kRejected)) fail_protocol("TcpStore::connect", "unexpected reply to the hello");
  sock_.close();
  auto reason = reply.payload.empty() ? 0 : reply.payload[0];
  if (reason == uint8_t(detail::RejectReason::kVersion))
    failure_ = concat("the store at ", address_, " speaks another protocol version (mixed tessera builds in one job?)");
  else
    failure_ = concat("job token rejected by the store at ", address_,
                      "; every process of a job must present the token its launcher generated (TESSERA_JOB_TOKEN)");
  throw ValueError(concat("[TcpStore] ", me(), ": ", failure_));
}

TcpStore::Reply TcpStore::call(const char* op, const Bytes& frame, Clock::time_point deadline,
                               const std::string& what) {
  if (!failure_.empty())
    throw PeerFailureError(concat("[", op, "] ", me(), ": ", failure_, " (in an earlier call)"));
  TESSERA_CHECK(frame.size() - detail::kFrameHeaderBytes <= options_.max_message_bytes, "[", op, "] ", me(), ": ",
                what, " is a message of ", frame.size() - detail::kFrameHeaderBytes,
                " bytes, above max_message_bytes ", options_.max_message_bytes);
  if (!sock_.valid()) connect_locked();  // reopened after a reply timed out
  auto check = [&](const detail::IoResult& r) {
    if (r.status == detail::IoStatus::kOk) return;
    if (r.status != detail::IoStatus::kTimeout) fail_peer(op, r.error);
    sock_.close();  // a late reply would answer the next request: start that one on a fresh connection
    throw TimeoutError(concat("[", op, "] ", me(), " got no reply from the store at ", address_, " to ", what,
                              " in time; the store is alive but not answering"));
  };
  check(detail::send_all(sock_.fd(), frame.data(), frame.size(), deadline));
  uint8_t header[detail::kFrameHeaderBytes];
  check(detail::recv_exact(sock_.fd(), header, sizeof(header), deadline));
  uint32_t len = detail::read_u32_le(header);
  if (len == 0 || len > options_.max_message_bytes)
    fail_protocol(op, concat("a reply of ", len, " bytes (max_message_bytes is ", options_.max_message_bytes, ")"));
  Bytes payload(len);
  check(detail::recv_exact(sock_.fd(), payload.data(), len, deadline));
  Reply reply;
  reply.opcode = payload[0];
  reply.payload.assign(payload.begin() + 1, payload.end());
  return reply;
}

void TcpStore::fail_peer(const char* op, const std::string& why) {
  sock_.close();
  failure_ = concat("lost the connection to the store at ", address_, " (", why, ")");
  throw PeerFailureError(concat("[", op, "] ", me(), ": ", failure_,
                                "; did the launcher or the process hosting the store exit?"));
}

void TcpStore::fail_protocol(const char* op, const std::string& why) {
  sock_.close();
  failure_ = concat("malformed reply from the store at ", address_, ": ", why);
  throw PeerFailureError(concat("[", op, "] ", me(), ": ", failure_));
}

namespace {

// Reply checks throw ProtocolError; each op turns it into fail_protocol, naming itself.
void expect_opcode(const uint8_t actual, StoreReply expected) {
  if (actual != uint8_t(expected))
    throw detail::ProtocolError(concat("reply opcode ", int(actual), " where ", int(expected), " was expected"));
}

}  // namespace

void TcpStore::set(const std::string& key, const Bytes& value) {
  constexpr const char* op = "TcpStore::set";
  Bytes frame = FrameWriter(uint8_t(StoreOp::kSet)).str(key).bytes(value).finish();
  std::lock_guard lock(mu_);
  Reply reply = call(op, frame, detail::deadline_after(timeout()), concat("set of key '", key, "'"));
  try {
    expect_opcode(reply.opcode, StoreReply::kOk);
    FrameReader(reply.payload.data(), reply.payload.size()).expect_end();
  } catch (const detail::ProtocolError& e) {
    fail_protocol(op, e.what());
  }
}

Bytes TcpStore::get(const std::string& key) {
  constexpr const char* op = "TcpStore::get";
  Milliseconds timeout = detail::clamp_timeout(this->timeout());
  Bytes frame = FrameWriter(uint8_t(StoreOp::kGet)).str(key).i64(timeout.count()).finish();
  std::lock_guard lock(mu_);
  Reply reply = call(op, frame, detail::deadline_after(timeout + kReplyGrace), concat("get of key '", key, "'"));
  std::vector<std::string> missing;
  try {
    FrameReader r(reply.payload.data(), reply.payload.size());
    if (reply.opcode == uint8_t(StoreReply::kValue)) {
      Bytes value = r.bytes();
      r.expect_end();
      return value;
    }
    expect_opcode(reply.opcode, StoreReply::kTimeout);
    missing = r.keys();
    r.expect_end();
  } catch (const detail::ProtocolError& e) {
    fail_protocol(op, e.what());
  }
  fail_wait_timeout(op, timeout, missing);
}

int64_t TcpStore::add(const std::string& key, int64_t delta) {
  constexpr const char* op = "TcpStore::add";
  Bytes frame = FrameWriter(uint8_t(StoreOp::kAdd)).str(key).i64(delta).finish();
  std::lock_guard lock(mu_);
  Reply reply = call(op, frame, detail::deadline_after(timeout()), concat("add to key '", key, "'"));
  std::string message;
  try {
    FrameReader r(reply.payload.data(), reply.payload.size());
    if (reply.opcode == uint8_t(StoreReply::kInt)) {
      int64_t value = r.i64();
      r.expect_end();
      return value;
    }
    expect_opcode(reply.opcode, StoreReply::kError);  // e.g. the key holds a non-integer
    message = r.str();
    r.expect_end();
  } catch (const detail::ProtocolError& e) {
    fail_protocol(op, e.what());
  }
  throw ValueError(concat(message, " (", me(), ", store at ", address_, ")"));
}

Bytes TcpStore::compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) {
  constexpr const char* op = "TcpStore::compare_set";
  Bytes frame = FrameWriter(uint8_t(StoreOp::kCompareSet)).str(key).bytes(expected).bytes(desired).finish();
  std::lock_guard lock(mu_);
  Reply reply = call(op, frame, detail::deadline_after(timeout()), concat("compare_set of key '", key, "'"));
  try {
    expect_opcode(reply.opcode, StoreReply::kValue);
    FrameReader r(reply.payload.data(), reply.payload.size());
    Bytes value = r.bytes();
    r.expect_end();
    return value;
  } catch (const detail::ProtocolError& e) {
    fail_protocol(op, e.what());
  }
}

bool TcpStore::delete_key(const std::string& key) {
  constexpr const char* op = "TcpStore::delete_key";
  Bytes frame = FrameWriter(uint8_t(StoreOp::kDeleteKey)).str(key).finish();
  std::lock_guard lock(mu_);
  Reply reply = call(op, frame, detail::deadline_after(timeout()), concat("delete of key '", key, "'"));
  return read_bool(op, reply);
}

bool TcpStore::check(const std::vector<std::string>& keys) {
  constexpr const char* op = "TcpStore::check";
  Bytes frame = FrameWriter(uint8_t(StoreOp::kCheck)).keys(keys).finish();
  std::lock_guard lock(mu_);
  Reply reply = call(op, frame, detail::deadline_after(timeout()), concat("check of keys ", detail::format_keys(keys)));
  return read_bool(op, reply);
}

bool TcpStore::read_bool(const char* op, const Reply& reply) {
  try {
    expect_opcode(reply.opcode, StoreReply::kBool);
    FrameReader r(reply.payload.data(), reply.payload.size());
    uint8_t value = r.u8();
    r.expect_end();
    return value != 0;
  } catch (const detail::ProtocolError& e) {
    fail_protocol(op, e.what());
  }
}

void TcpStore::wait(const std::vector<std::string>& keys, Milliseconds timeout) {
  constexpr const char* op = "TcpStore::wait";
  timeout = detail::clamp_timeout(timeout);
  Bytes frame = FrameWriter(uint8_t(StoreOp::kWait)).keys(keys).i64(timeout.count()).finish();
  std::lock_guard lock(mu_);
  Reply reply = call(op, frame, detail::deadline_after(timeout + kReplyGrace),
                     concat("wait for keys ", detail::format_keys(keys)));
  std::vector<std::string> missing;
  try {
    FrameReader r(reply.payload.data(), reply.payload.size());
    if (reply.opcode == uint8_t(StoreReply::kOk)) {
      r.expect_end();
      return;
    }
    expect_opcode(reply.opcode, StoreReply::kTimeout);
    missing = r.keys();
    r.expect_end();
  } catch (const detail::ProtocolError& e) {
    fail_protocol(op, e.what());
  }
  fail_wait_timeout(op, timeout, missing);
}

void TcpStore::fail_wait_timeout(const char* op, Milliseconds timeout, const std::vector<std::string>& missing) {
  throw TimeoutError(concat("[", op, "] ", me(), " timed out after ", timeout.count(), " ms waiting for keys: ",
                            detail::format_keys(missing), " (store at ", address_, ")"));
}

}  // namespace tessera::dist
