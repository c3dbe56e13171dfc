#include "tessera/dist/store/key_value_table.h"

#include <charconv>

#include "tessera/core/error.h"

namespace tessera::dist::detail {

const Bytes* KeyValueTable::find(const std::string& key) const {
  auto it = data_.find(key);
  return it == data_.end() ? nullptr : &it->second;
}

int64_t KeyValueTable::add(const char* op, const std::string& key, int64_t delta) {
  Bytes& value = data_[key];  // an absent counter starts at 0
  int64_t current = 0;
  if (!value.empty()) {
    const char* begin = reinterpret_cast<const char*>(value.data());
    const char* end = begin + value.size();
    auto [ptr, ec] = std::from_chars(begin, end, current);
    TESSERA_CHECK(ec == std::errc() && ptr == end, "[", op, "] key '", key, "' holds a value of ",
                  value.size(), " bytes that is not a decimal integer; add() needs a counter key");
  }
  int64_t result = 0;
  TESSERA_CHECK(!__builtin_add_overflow(current, delta, &result), "[", op, "] key '", key, "': ", current,
                " + ", delta, " overflows int64");
  std::string text = std::to_string(result);
  value.assign(text.begin(), text.end());
  return result;
}

Bytes KeyValueTable::compare_set(const std::string& key, const Bytes& expected, const Bytes& desired,
                                 bool* changed) {
  *changed = false;
  auto it = data_.find(key);
  if (it == data_.end()) {
    if (!expected.empty()) return {};
    data_.emplace(key, desired);
    *changed = true;
    return desired;
  }
  if (it->second != expected) return it->second;
  it->second = desired;
  *changed = true;
  return desired;
}

std::vector<std::string> KeyValueTable::missing(const std::vector<std::string>& keys) const {
  std::vector<std::string> out;
  for (const auto& k : keys)
    if (!data_.count(k)) out.push_back(k);
  return out;
}

std::string format_keys(const std::vector<std::string>& keys) {
  constexpr size_t kShown = 16;
  std::string out;
  for (size_t i = 0; i < keys.size() && i < kShown; ++i) {
    if (i) out += ", ";
    out += keys[i];
  }
  if (keys.size() > kShown) out += " and " + std::to_string(keys.size() - kShown) + " more";
  return out;
}

}  // namespace tessera::dist::detail
