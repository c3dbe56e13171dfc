// Jobs of a benchmark across test hosts (scripts/cluster.sh: network namespaces joined by a bridge,
// each link shaped with tc), shared by `bench ddp --hosts` and `bench ps --hosts`. Needs root.
#pragma once
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace tessera::bench {

std::vector<std::string> split_list(const std::string& text);
std::string quoted(const std::string& s);

// `hosts` test hosts at `link` ("unshaped" or a tc rate such as 1gbit), removed by the destructor.
struct TestHosts {
  std::string cluster;  // "env TESSERA_CLUSTER=NAME bash .../cluster.sh"
  int count = 0;
  bool up = false;
  TestHosts(const std::string& name, int hosts, const std::string& link, const std::string& log);
  ~TestHosts();
  TestHosts(const TestHosts&) = delete;
  TestHosts& operator=(const TestHosts&) = delete;
};

// One job across every host: in host i, `tessera run --nnodes N --node-rank i --master-addr
// 198.18.0.1 --master-port 29500 <run_args> -- <this program> <program_args>`, all started together,
// each bounded by 600 s, with `token` as the job token and one thread per process. Returns node 0's
// last JSON line (rank 0 prints it), or null with every node's log printed when the job failed.
nlohmann::json run_on_hosts(const TestHosts& hosts, const std::string& run_args, const std::string& program_args,
                            const std::string& dir, const std::string& token, const std::string& what);

}  // namespace tessera::bench
