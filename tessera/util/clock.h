// Wall-clock time as the logs, timelines and records carry it: ranks on one machine (and on machines
// whose clocks agree) line up.
#pragma once
#include <chrono>
#include <cstdint>

namespace tessera {

inline int64_t unix_micros() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

inline double unix_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace tessera
