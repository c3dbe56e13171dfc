// A whole non-negative decimal integer, the text and nothing else: "42" -> 42; "", "-1", "4x", " 4" and
// numbers past int64 -> nullopt. For the small records and settings that processes pass each other.
#pragma once
#include <charconv>
#include <cstdint>
#include <optional>
#include <string_view>

namespace tessera {

inline std::optional<int64_t> parse_whole_number(std::string_view text) {
  int64_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || error != std::errc() || end != text.data() + text.size() || value < 0) return std::nullopt;
  return value;
}

}  // namespace tessera
