// Helpers of the benchmarks that run jobs under the launcher (bench.h).
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "bench/bench.h"

namespace tessera::bench {

nlohmann::json last_json_line(const std::string& text) {
  nlohmann::json found;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    size_t brace = line.find('{');  // after the launcher's "[rank 0] " prefix
    if (brace == std::string::npos) continue;
    try {
      found = nlohmann::json::parse(line.substr(brace));
    } catch (const std::exception&) {
    }
  }
  return found;
}

std::string reference_python() {
  const std::string venv = std::string(TESSERA_SOURCE_DIR) + "/.venv/bin/python3";
  return std::filesystem::exists(venv) ? venv : "/usr/bin/python3";
}

CommandOutput run_capture(const std::string& command, int timeout_s) {
  CommandOutput result;
  const std::string bounded = "timeout " + std::to_string(timeout_s) + " " + command;
  FILE* pipe = popen(bounded.c_str(), "r");
  if (pipe == nullptr) return result;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, pipe)) result.out.append(buf, n);
  result.ok = pclose(pipe) == 0;
  return result;
}

std::string read_all(const std::string& path) {
  std::ifstream f(path);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

std::string median_cell(const std::vector<double>& v) {
  if (v.empty()) return "-";
  char s[96];
  std::snprintf(s, sizeof s, "%.0f [%.0f-%.0f]", median(v), *std::min_element(v.begin(), v.end()),
                *std::max_element(v.begin(), v.end()));
  return s;
}

}  // namespace tessera::bench
