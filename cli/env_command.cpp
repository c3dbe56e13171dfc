// tessera env: every TESSERA_* setting with its default, its meaning and this process's value.
#include <cstdio>
#include <string>

#include "cli/commands.h"
#include "tessera/util/settings.h"

namespace tessera::cli {

Command add_env_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("env", "List every TESSERA_* environment setting, its default and its value here");
  return {cmd, []() -> int {
    for (const Setting& s : all_settings()) {
      const char* value = env_setting(s.name);
      std::printf("%.*s=%s\n    %.*s\n    default: %.*s; values: %s; set by: %.*s\n", static_cast<int>(s.name.size()),
                  s.name.data(), value != nullptr ? value : "(unset)", static_cast<int>(s.meaning.size()),
                  s.meaning.data(), static_cast<int>(s.default_value.size()), s.default_value.data(),
                  accepted_values(s).c_str(), static_cast<int>(s.set_by.size()), s.set_by.data());
    }
    return 0;
  }};
}

}  // namespace tessera::cli
