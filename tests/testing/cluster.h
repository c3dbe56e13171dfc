// Test hosts for one test (scripts/cluster.sh: network, UTS, IPC and mount namespaces joined by a
// bridge, addresses in 198.18.0.0/15), removed on every exit path (destructor). UP_OR_SKIP skips,
// saying why, where they cannot be made (not root, no unshare).
#pragma once
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "testing/temp_dir.h"

namespace tessera::testing {

inline const std::string kClusterScript = std::string(TESSERA_SOURCE_DIR) + "/scripts/cluster.sh";

// A cluster name of `prefix` and 5 base-36 digits from the pid and the clock: pids repeat between the
// suite's runs (a sandbox numbers them from 1 again), and a name that collided with a cluster an
// earlier run left behind would make `up` refuse, or `down` remove another test's hosts.
inline std::string unique_cluster_name(char prefix) {
  uint64_t x = static_cast<uint64_t>(::getpid()) * 0x9E3779B97F4A7C15ull ^
               static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  std::string name(1, prefix);
  for (int i = 0; i < 5; ++i, x /= 36) name += "0123456789abcdefghijklmnopqrstuvwxyz"[x % 36];
  return name;
}

class Cluster {
 public:
  Cluster(int n, const std::string& dir) : name_(unique_cluster_name('m')), dir_(dir) {
    const std::string cmd = env() + " bash " + kClusterScript + " up " + std::to_string(n) + " > " + dir + "/cluster.log 2>&1";
    up_ = std::system(cmd.c_str()) == 0;
  }
  ~Cluster() { std::system((env() + " bash " + kClusterScript + " down > /dev/null 2>&1").c_str()); }
  Cluster(const Cluster&) = delete;
  Cluster& operator=(const Cluster&) = delete;
  bool up() const { return up_; }
  const std::string& name() const { return name_; }
  std::string why_not() const { return read_text(dir_ + "/cluster.log"); }
  // `command` inside host `host` (1-based).
  std::string in(int host, const std::string& command) const {
    return "env " + env() + " bash " + kClusterScript + " exec host" + std::to_string(host) + " " + command;
  }
  // cluster.sh's other commands (kill HOST, signal HOST SIG ARG1, ...) on this cluster.
  std::string script(const std::string& args) const { return "env " + env() + " bash " + kClusterScript + " " + args; }

 private:
  std::string env() const { return "TESSERA_CLUSTER=" + name_; }
  std::string name_, dir_;
  bool up_ = false;
};

}  // namespace tessera::testing

#define UP_OR_SKIP(cluster)                                                                    \
  if (::geteuid() != 0) GTEST_SKIP() << "test hosts need root (network namespaces, veth, tc)"; \
  if (!(cluster).up()) GTEST_SKIP() << "could not make test hosts here: " << (cluster).why_not()
