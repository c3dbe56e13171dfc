// How the elastic agent speaks: one "tessera run: ..." line at a time on its stderr, with durations
// in seconds. Shared by the agent and its watchers so that every line reads the same.
#pragma once
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>

namespace tessera::elastic::detail {

inline void say(int fd, const std::string& line) {
  std::string text = "tessera run: " + line + "\n";
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n <= 0) return;
    done += static_cast<size_t>(n);
  }
}

inline std::string seconds(std::chrono::steady_clock::duration d) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f s", std::chrono::duration<double>(d).count());
  return text;
}

}  // namespace tessera::elastic::detail
