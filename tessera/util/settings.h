// Every TESSERA_* environment variable tessera reads, in one registry: its name, its default and
// what it does. Code reads them only through env_setting (a name missing here is a programming
// error, caught by the first call); `tessera env` prints the table with this process's values, and
// docs/settings.md lists the same (a test keeps the two equal).
#pragma once
#include <span>
#include <string_view>

namespace tessera {

struct Setting {
  std::string_view name;
  std::string_view default_value;  // what applies when it is unset
  std::string_view meaning;
  std::string_view set_by;  // "user" or the launcher that sets it in its workers
};

std::span<const Setting> all_settings();

// The variable's value, or nullptr when it is unset or empty. Throws std::logic_error for a name
// that is not registered above.
const char* env_setting(std::string_view name);

}  // namespace tessera
