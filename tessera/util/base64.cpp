#include "tessera/util/base64.h"

#include <array>
#include <cstdint>

#include "tessera/core/error.h"

namespace tessera {

namespace {
constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

// The value of each byte, -1 outside the alphabet: a table, as tessera serve decodes every request's
// inputs through here.
constexpr std::array<int8_t, 256> kValues = [] {
  std::array<int8_t, 256> v{};
  v.fill(-1);
  for (int i = 0; i < 64; ++i) v[static_cast<uint8_t>(kAlphabet[i])] = static_cast<int8_t>(i);
  return v;
}();
}  // namespace

std::string base64_encode(std::string_view in) {
  std::string out;
  out.reserve((in.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    uint32_t v = (uint8_t(in[i]) << 16) | (uint8_t(in[i + 1]) << 8) | uint8_t(in[i + 2]);
    for (int s = 18; s >= 0; s -= 6) out += kAlphabet[(v >> s) & 63];
  }
  if (i + 1 == in.size()) {
    uint32_t v = uint8_t(in[i]) << 16;
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += "==";
  } else if (i + 2 == in.size()) {
    uint32_t v = (uint8_t(in[i]) << 16) | (uint8_t(in[i + 1]) << 8);
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += kAlphabet[(v >> 6) & 63];
    out += '=';
  }
  return out;
}

std::string base64_decode(std::string_view in) {
  size_t data = in.size();
  while (data > 0 && in.size() - data < 2 && in[data - 1] == '=') --data;
  const size_t padding = in.size() - data;
  TESSERA_CHECK(data % 4 != 1 && (padding == 0 || in.size() % 4 == 0), "[base64] ", in.size(),
                " characters with ", padding, " of padding is not a whole encoding");
  std::string out(data / 4 * 3 + (data % 4 == 0 ? 0 : data % 4 - 1), '\0');
  size_t o = 0;
  uint32_t v = 0;
  int bits = 0;
  for (size_t i = 0; i < data; ++i) {
    const int x = kValues[static_cast<uint8_t>(in[i])];
    TESSERA_CHECK(x >= 0, "[base64] character ", i, " (code ", int(uint8_t(in[i])), ") is not in the base64 alphabet");
    v = (v << 6) | static_cast<uint32_t>(x);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out[o++] = static_cast<char>((v >> bits) & 0xff);
    }
  }
  return out;
}

}  // namespace tessera
