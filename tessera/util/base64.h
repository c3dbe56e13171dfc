// Base64 (RFC 4648, the standard alphabet with '=' padding): etcd's JSON API carries keys and
// values in it, and `tessera serve` accepts float32 inputs in it.
#pragma once
#include <string>
#include <string_view>

namespace tessera {

std::string base64_encode(std::string_view in);
// Strict: ValueError naming the position of a character outside the alphabet, of padding anywhere
// but at the end, or of a length that is not a whole number of 4-character groups (padding
// included) or 2/3 characters short of one.
std::string base64_decode(std::string_view in);

}  // namespace tessera
