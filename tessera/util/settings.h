// Every TESSERA_* environment variable tessera reads, in one registry: its name, its default, what
// it does, and for numbers and switches its type and bounds. Code reads them only through the readers
// below (a name missing here, or read as the wrong type, is a programming error, caught by the first
// call); `tessera env` prints the table with this process's values, and docs/settings.md lists the
// same (a test keeps the two equal). As NCCL's NCCL_PARAM: declared once, parsed once.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace tessera {

enum class SettingType : uint8_t {
  kText,     // read with env_setting
  kInteger,  // env_int: a decimal integer within [min, max]
  kFlag,     // env_flag: 1/0 (also true/false, on/off, yes/no)
};

struct Setting {
  std::string_view name;
  std::string_view default_value;  // what applies when it is unset
  std::string_view meaning;
  std::string_view set_by;  // "user" or the launcher that sets it in its workers
  SettingType type = SettingType::kText;
  int64_t min = 0, max = 0;  // kInteger: the accepted values
};

std::span<const Setting> all_settings();
// "text", "0 or 1", "integer 1 to 1024": what a setting accepts, as `tessera env` and the docs say it.
std::string accepted_values(const Setting& setting);

// The variable's text, or nullptr when it is unset or empty. Throws std::logic_error for a name that
// is not registered above.
const char* env_setting(std::string_view name);
// An integer setting's value, or `fallback` when it is unset (the caller's default: some depend on
// the machine). A value that is not a whole integer within the registered bounds is a ValueError
// naming the variable, its text and the bounds, never silently the default.
int64_t env_int(std::string_view name, int64_t fallback);
// A flag's value, or `fallback` when unset; ValueError for anything but 1/0, true/false, on/off, yes/no.
bool env_flag(std::string_view name, bool fallback);

}  // namespace tessera
