// A real Slurm cluster for one test (scripts/slurm.sh: slurmctld and one slurmd per test host,
// munge, on the hosts of scripts/cluster.sh), removed on every exit path (destructor). SLURM_UP_OR_SKIP
// skips, saying why, where it cannot be made (not root, Slurm not installed), and fails when it
// could be and did not come up.
#pragma once
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "testing/cluster.h"
#include "testing/temp_dir.h"

namespace tessera::testing {

inline const std::string kSlurmScript = std::string(TESSERA_SOURCE_DIR) + "/scripts/slurm.sh";

class SlurmCluster {
 public:
  SlurmCluster(int nodes, const std::string& dir)
      : name_(unique_cluster_name('s')), dir_(dir) {
    installed_ = std::system("command -v slurmctld > /dev/null && command -v munged > /dev/null") == 0;
    if (installed_ && ::geteuid() == 0)
      up_ = std::system((env() + " bash " + kSlurmScript + " up " + std::to_string(nodes) + " > " + dir +
                         "/slurm-up.log 2>&1")
                            .c_str()) == 0;
  }
  ~SlurmCluster() { std::system((env() + " bash " + kSlurmScript + " down > /dev/null 2>&1").c_str()); }
  SlurmCluster(const SlurmCluster&) = delete;
  SlurmCluster& operator=(const SlurmCluster&) = delete;

  bool installed() const { return installed_; }
  bool up() const { return up_; }
  std::string why_not() const { return read_text(dir_ + "/slurm-up.log"); }
  // `command` (srun, sbatch, squeue, scancel, ...) inside test host `host` (1-based), in `dir`.
  std::string in(int host, const std::string& command) const {
    return "env -C " + dir_ + " " + env() + " bash " + kSlurmScript + " exec host" + std::to_string(host) + " " +
           command;
  }
  // scripts/cluster.sh's commands (kill HOST, signal ...) on this cluster's hosts.
  std::string hosts(const std::string& args) const {
    return "env " + env() + " bash " + std::string(TESSERA_SOURCE_DIR) + "/scripts/cluster.sh " + args;
  }

 private:
  std::string env() const { return "TESSERA_CLUSTER=" + name_; }
  std::string name_, dir_;
  bool installed_ = false, up_ = false;
};

}  // namespace tessera::testing

#define SLURM_UP_OR_SKIP(cluster)                                                                          \
  if (::geteuid() != 0) GTEST_SKIP() << "a Slurm cluster on test hosts needs root (namespaces, daemons)"; \
  if (!(cluster).installed()) GTEST_SKIP() << "slurm-wlm and munge are not installed (scripts/setup.sh)";   \
  if (!(cluster).up()) GTEST_FAIL() << "could not start a Slurm cluster here: " << (cluster).why_not()
