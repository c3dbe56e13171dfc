#include "tessera/util/debug_wedge.h"

#include <cstdlib>
#include <string>

#include "tessera/core/error.h"
#include "tessera/util/settings.h"
#include "tessera/util/whole_number.h"

namespace tessera {

std::optional<int64_t> debug_wedge_point(std::string_view where) {
  const char* value = env_setting("TESSERA_DEBUG_WEDGE");
  if (value == nullptr) return std::nullopt;
  const std::string_view text(value);
  const size_t first = text.find(':'), second = text.find(':', first == std::string_view::npos ? 0 : first + 1);
  std::optional<int64_t> rank, at;
  if (first != std::string_view::npos && second != std::string_view::npos) {
    rank = parse_whole_number(text.substr(first + 1, second - first - 1));
    at = parse_whole_number(text.substr(second + 1));
  }
  TESSERA_CHECK(rank && at && (text.substr(0, first) == "step" || text.substr(0, first) == "loader"),
                "[debug] TESSERA_DEBUG_WEDGE='", text, "' is not step:<rank>:<step> or loader:<rank>:<batch>");
  if (text.substr(0, first) != where) return std::nullopt;
  const char* my_rank = std::getenv("RANK");  // the launcher's contract (dist/launcher/env.h), not a setting
  if (parse_whole_number(my_rank == nullptr ? "0" : my_rank) != rank) return std::nullopt;
  return at;
}

}  // namespace tessera
