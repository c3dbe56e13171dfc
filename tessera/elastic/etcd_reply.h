// What the etcd rendezvous (etcd_rendezvous.cpp) reads from the network, as pure functions: the
// HTTP/1.1 reply of etcd's v3 JSON gateway (status line, headers, a plain or chunked body, JSON), the
// base64 its keys and values travel in, and the fields the rendezvous takes from a reply. Anything a
// broken or hostile server sends ends in an IoError that names the request, never another exception,
// a read out of bounds or a loop that does not end (fuzz/etcd_reply_fuzz.cpp).
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "tessera/util/base64.h"

namespace tessera::elastic {

using tessera::base64_decode;
using tessera::base64_encode;

// The JSON body of a 200 reply to `what` (the request's path, for errors); IoError otherwise.
nlohmann::json parse_etcd_reply(const std::string& response, const std::string& what);

// The decoded value of the first key-value pair in a range reply's "kvs" (nullopt when the key is
// absent: the gateway omits empty fields). IoError when "kvs" is there but not a list of objects.
std::optional<std::string> first_value(const nlohmann::json& range_reply, const std::string& what);

// A counter's value as stored by RendezvousStore::add; IoError naming `key` if it is not an integer.
int64_t parse_counter(const std::string& text, const std::string& key);

}  // namespace tessera::elastic
