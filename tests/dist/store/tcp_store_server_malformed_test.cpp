// Hand-made hostile or broken frames over a raw socket: the server must drop that connection with
// a logged reason, never run its commands, and keep serving everyone else.
#include <gtest/gtest.h>

#include <limits>

#include "store_test_helpers.h"
#include "tessera/dist/store/tcp_store_protocol.h"

namespace tessera::dist {
namespace {

using detail::FrameWriter;
using detail::StoreOp;
using testing::LogCapture;
using testing::RawConnection;

Bytes u32_le(uint32_t v) { return {uint8_t(v), uint8_t(v >> 8), uint8_t(v >> 16), uint8_t(v >> 24)}; }

Bytes concat_bytes(Bytes a, const Bytes& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

struct MalformedCase {
  std::string name;
  bool hello_first;   // authenticate before sending `bytes`
  Bytes bytes;        // what the raw client sends
  bool close_write;   // then shut down its sending side (a truncated stream)
  std::string logged; // a fragment of the server's log line
};

std::vector<MalformedCase> malformed_cases() {
  std::vector<MalformedCase> cases;
  cases.push_back({"OversizedLengthBeforeHello", false, u32_le(0xFFFFFFFFu), false,
                   "frame length 4294967295 is above the limit of 65536 bytes for a hello"});
  cases.push_back({"OversizedLengthAfterHello", true, u32_le((1u << 20) + 1), false,
                   "frame length 1048577 is above the limit of 1048576 bytes"});
  cases.push_back({"ZeroLengthFrame", true, u32_le(0), false, "frame length 0 is zero"});
  // A set whose key claims 1000 bytes inside a 10-byte frame.
  Bytes lying_key = concat_bytes(u32_le(10), concat_bytes({uint8_t(StoreOp::kSet)}, u32_le(1000)));
  lying_key.resize(4 + 10, 'x');
  cases.push_back({"FieldLongerThanFrame", true, lying_key, false, "string of 1000 bytes exceeds the 5 bytes left"});
  cases.push_back({"HugeKeyCount", true,
                   concat_bytes(u32_le(5), concat_bytes({uint8_t(StoreOp::kCheck)}, u32_le(0xFFFFFFFFu))), false,
                   "key count 4294967295 cannot fit"});
  cases.push_back({"GarbageOpcode", true, FrameWriter(0x7F).str("k").finish(), false, "unknown opcode 127"});
  cases.push_back({"TrailingBytes", true, FrameWriter(uint8_t(StoreOp::kDeleteKey)).str("k").u8(0).finish(), false,
                   "1 unexpected bytes after the last field"});
  cases.push_back({"CommandBeforeHello", false, FrameWriter(uint8_t(StoreOp::kSet)).str("hacked").str("1").finish(),
                   false, "expected a hello with the job token"});
  cases.push_back({"SecondHello", true,
                   FrameWriter(uint8_t(StoreOp::kHello)).u32(detail::kStoreProtocolVersion).i64(0).str("t").finish(),
                   false, "a second hello"});
  Bytes truncated = u32_le(100);
  truncated.resize(4 + 10, uint8_t(StoreOp::kSet));
  cases.push_back({"TruncatedStream", true, truncated, true, "closed the connection in the middle of a frame"});
  return cases;
}

class TcpStoreMalformedFrameTest : public ::testing::TestWithParam<MalformedCase> {
 protected:
  void SetUp() override {
    auto options = testing::server_options(log_);
    options.max_message_bytes = 1 << 20;
    server_ = std::make_unique<TcpStoreServer>(options);
    good_ = std::make_unique<TcpStore>(testing::client_options(*server_, 0));
  }
  LogCapture log_;
  std::unique_ptr<TcpStoreServer> server_;
  std::unique_ptr<TcpStore> good_;
};

TEST_P(TcpStoreMalformedFrameTest, ServerDropsTheConnectionAndKeepsServing) {
  const MalformedCase& c = GetParam();
  good_->set("before", std::string("1"));
  RawConnection raw(server_->port());
  if (c.hello_first) {
    raw.send_hello();
    ASSERT_EQ(raw.read_reply_opcode(), uint8_t(detail::StoreReply::kOk));
  }
  raw.send(c.bytes);
  if (c.close_write) raw.shutdown_write();
  EXPECT_TRUE(raw.closed_by_server()) << "the server kept a connection that sent " << c.name;
  EXPECT_TRUE(log_.contains(c.logged)) << "log:\n" << log_.joined();
  EXPECT_TRUE(log_.contains("(rank 99)") || !c.hello_first) << log_.joined();
  // Everyone else is still served, including connections made afterwards.
  EXPECT_EQ(good_->get_string("before"), "1");
  TcpStore late(testing::client_options(*server_, 1));
  late.set("after", std::string("2"));
  EXPECT_EQ(good_->get_string("after"), "2");
  EXPECT_FALSE(good_->check({"hacked"}));
}

INSTANTIATE_TEST_SUITE_P(Frames, TcpStoreMalformedFrameTest, ::testing::ValuesIn(malformed_cases()),
                         [](const auto& info) { return info.param.name; });

TEST(TcpStoreTokenTest, CommandsAfterAWrongTokenNeverRun) {
  LogCapture log;
  TcpStoreServer server(testing::server_options(log));
  RawConnection raw(server.port());
  // The wrong hello and a set in one write: the set must not run.
  Bytes hello = FrameWriter(uint8_t(StoreOp::kHello)).u32(detail::kStoreProtocolVersion).i64(1).str("guess").finish();
  Bytes set = FrameWriter(uint8_t(StoreOp::kSet)).str("hacked").str("1").finish();
  raw.send(concat_bytes(hello, set));
  EXPECT_TRUE(raw.closed_by_server());
  TcpStore good(testing::client_options(server));
  EXPECT_FALSE(good.check({"hacked"}));
  EXPECT_TRUE(log.contains("wrong job token")) << log.joined();
}

TEST(TcpStoreTokenTest, WrongProtocolVersionIsRejected) {
  LogCapture log;
  TcpStoreServer server(testing::server_options(log));
  RawConnection raw(server.port());
  raw.send(FrameWriter(uint8_t(StoreOp::kHello)).u32(999).i64(1).str(testing::kToken).finish());
  EXPECT_EQ(raw.read_reply_opcode(), uint8_t(detail::StoreReply::kRejected));
  EXPECT_TRUE(raw.closed_by_server());
  EXPECT_TRUE(log.contains("protocol version 999")) << log.joined();
}

// Silent connections (a port scan, a half-open client) are closed once the hello timeout passes,
// so they cannot hold the slots of max_connections; a rank connecting afterwards is served.
TEST(TcpStoreServerTest, AConnectionWithoutAHelloIsClosedAfterTheHelloTimeout) {
  LogCapture log;
  auto options = testing::server_options(log);
  options.hello_timeout = std::chrono::milliseconds(200);  // short, for the test
  options.max_connections = 4;
  TcpStoreServer server(options);
  std::vector<std::unique_ptr<RawConnection>> silent;
  for (int i = 0; i < 4; ++i) silent.push_back(std::make_unique<RawConnection>(server.port()));
  for (auto& raw : silent) EXPECT_TRUE(raw->closed_by_server());
  EXPECT_TRUE(log.contains("no hello within 200 ms")) << log.joined();
  TcpStore good(testing::client_options(server));
  good.set("k", std::string("v"));
  EXPECT_EQ(good.get_string("k"), "v");
}

TEST(TcpStoreServerTest, ClientKilledWhileWaitingIsForgotten) {
  // A raw client parks a wait and vanishes; the server must drop its waiter quietly and later
  // sets must not write to a closed socket.
  LogCapture log;
  TcpStoreServer server(testing::server_options(log));
  TcpStore good(testing::client_options(server));
  {
    RawConnection raw(server.port());
    raw.send_hello();
    ASSERT_EQ(raw.read_reply_opcode(), uint8_t(detail::StoreReply::kOk));
    raw.send(FrameWriter(uint8_t(StoreOp::kWait)).keys({"gone"}).i64(60000).finish());
    raw.send(FrameWriter(uint8_t(StoreOp::kSet)).str("queued").str("1").finish());  // queued behind the wait
    good.wait({}, std::chrono::milliseconds(0));
  }  // closed here
  good.set("gone", std::string("1"));
  EXPECT_EQ(good.get_string("gone"), "1");
  EXPECT_EQ(log.joined(), "");
}

}  // namespace
}  // namespace tessera::dist
