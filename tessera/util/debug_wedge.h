// Fault injection for the wedge watch's tests (dist/launcher/wedge_watch.h): TESSERA_DEBUG_WEDGE =
// "<where>:<rank>:<at>" makes the process of global rank <rank> (its RANK) block at one point, as a
// wedged rank does:
//   step:R:S    the trainer blocks before its step S, leaving out that step's collectives, which
//               the other ranks wait in;
//   loader:R:B  the data loader's worker blocks before batch B of an epoch (0-based), and the
//               trainer waits for that batch.
// Never set outside tests.
#pragma once
#include <cstdint>
#include <optional>
#include <string_view>

namespace tessera {

// The point of `where` this process must block at, nullopt when TESSERA_DEBUG_WEDGE names none
// here. ValueError for text that is not "<where>:<rank>:<at>".
std::optional<int64_t> debug_wedge_point(std::string_view where);

}  // namespace tessera
