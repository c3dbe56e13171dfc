// The two words every layer of tessera::dist speaks: a message's bytes, and a timeout.
#pragma once
#include <chrono>
#include <cstdint>
#include <vector>

namespace tessera::dist {

using Bytes = std::vector<uint8_t>;
using Milliseconds = std::chrono::milliseconds;

}  // namespace tessera::dist
