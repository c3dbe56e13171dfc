// What the etcd rendezvous reads from the network (etcd_reply.h): etcd's replies parse, and what a
// broken or hostile server could send instead ends in an IoError naming the request.
#include <gtest/gtest.h>

#include <string>

#include "tessera/core/error.h"
#include "tessera/elastic/etcd_reply.h"

namespace tessera::elastic {
namespace {

std::string reply(const std::string& body, int status = 200) {
  return "HTTP/1.1 " + std::to_string(status) + " OK\r\nContent-Type: application/json\r\nContent-Length: " +
         std::to_string(body.size()) + "\r\n\r\n" + body;
}

std::string chunked(const std::string& chunks) {
  return "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + chunks;
}

void expect_io_error(const std::string& response, const std::string& fragment) {
  try {
    first_value(parse_etcd_reply(response, "/v3/kv/range"), "/v3/kv/range");
    FAIL() << "accepted: " << response;
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("/v3/kv/range"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

TEST(EtcdReply, RangeRepliesPlainAndChunkedGiveTheValue) {
  const std::string body = R"({"kvs":[{"key":"L3Rlc3NlcmEvZw==","value":")" + base64_encode("12") + R"(","mod_revision":"5"}]})";
  EXPECT_EQ(first_value(parse_etcd_reply(reply(body), "r"), "r"), "12");
  char size[16];
  std::snprintf(size, sizeof size, "%zx", body.size() - 16);
  EXPECT_EQ(first_value(parse_etcd_reply(chunked("10\r\n" + body.substr(0, 16) + "\r\n" + size + "\r\n" + body.substr(16) +
                                                 "\r\n0\r\n\r\n"),
                                         "r"),
                        "r"),
            "12");
  EXPECT_EQ(first_value(parse_etcd_reply(reply(R"({"header":{}})"), "r"), "r"), std::nullopt);
  EXPECT_EQ(parse_counter("-3", "k"), -3);
}

TEST(EtcdReply, Base64RoundTripsEveryByte) {
  std::string all;
  for (int c = 0; c < 256; ++c) all += static_cast<char>(c);
  for (size_t n : {0, 1, 2, 3, 4, 255, 256}) EXPECT_EQ(base64_decode(base64_encode(all.substr(0, n))), all.substr(0, n));
}

TEST(EtcdReply, WhatABrokenOrHostileServerSendsIsAnIoError) {
  expect_io_error("", "malformed reply");
  expect_io_error("SSH-2.0-OpenSSH\r\n\r\n", "malformed reply");
  expect_io_error("HTTP/1.1 200 OK\r\nContent-Length: 5", "malformed reply");  // no end of headers
  expect_io_error(reply("{}", 500), "answered 500");
  expect_io_error(reply("{not json"), "not JSON");
  expect_io_error(reply("[1,2]"), "not a JSON object");
  expect_io_error(reply(R"({"kvs":"x"})"), "not a list");
  expect_io_error(reply(R"({"kvs":[7]})"), "not a list");
  expect_io_error(reply(R"({"kvs":[{"value":7}]})"), "not a base64 string");
  // Chunked bodies: a size that is not hex, one past the reply (it used to wrap the position and
  // loop), a chunk without its CRLF, a body cut inside a chunk header.
  expect_io_error(chunked("zz\r\n{}\r\n0\r\n\r\n"), "malformed chunk size");
  expect_io_error(chunked("ffffffffffffffff\r\n{}\r\n0\r\n\r\n"), "runs past the reply");
  expect_io_error(chunked("2\r\n{}XX0\r\n\r\n"), "not followed by CRLF");
  expect_io_error(chunked("2\r\n{}\r\n"), "inside a chunk header");
  EXPECT_THROW(parse_counter("12abc", "gen"), IoError);
  EXPECT_THROW(parse_counter("", "gen"), IoError);
  EXPECT_THROW(parse_counter("99999999999999999999", "gen"), IoError);
}

}  // namespace
}  // namespace tessera::elastic
