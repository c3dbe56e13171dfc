#include "bench/test_hosts.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "bench/bench.h"

namespace tessera::bench {

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

std::string quoted(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);  // ' ends, \' is one, ' reopens
  return out + "'";
}

TestHosts::TestHosts(const std::string& name, int hosts, const std::string& link, const std::string& log) : count(hosts) {
  cluster = "env TESSERA_CLUSTER=" + name + " bash " + quoted(std::string(TESSERA_SOURCE_DIR) + "/scripts/cluster.sh");
  const std::string cmd =
      cluster + " up " + std::to_string(hosts) + (link == "unshaped" ? "" : " --link " + link) + " > " + log + " 2>&1";
  up = std::system(cmd.c_str()) == 0;
}

TestHosts::~TestHosts() { std::system((cluster + " down > /dev/null 2>&1").c_str()); }

nlohmann::json run_on_hosts(const TestHosts& hosts, const std::string& run_args, const std::string& program_args,
                            const std::string& dir, const std::string& token, const std::string& what) {
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  std::string script = "export TESSERA_JOB_TOKEN=" + token + " TESSERA_NUM_THREADS=1; ";
  for (int node = 0; node < hosts.count; ++node)
    script += "timeout -k 5 600 " + hosts.cluster + " exec host" + std::to_string(node + 1) + " " + quoted(self) +
              " run --nnodes " + std::to_string(hosts.count) + " --node-rank " + std::to_string(node) +
              " --master-addr 198.18.0.1 --master-port 29500 " + run_args + " -- " + quoted(self) + " " + program_args +
              " > " + dir + "/node" + std::to_string(node) + ".log 2>&1 & p" + std::to_string(node) + "=$!; ";
  script += "s=0; for p in";
  for (int node = 0; node < hosts.count; ++node) script += " $p" + std::to_string(node);
  script += "; do wait $p || s=1; done; exit $s";
  std::ofstream(dir + "/job.sh") << script << "\n";
  const int rc = std::system(("bash " + dir + "/job.sh").c_str());
  const std::string out = read_all(dir + "/node0.log");
  if (rc != 0) {
    std::fprintf(stderr, "bench: the job across %d hosts failed (%s):\n", hosts.count, what.c_str());
    for (int node = 0; node < hosts.count; ++node)
      std::fprintf(stderr, "--- node %d\n%s", node, read_all(dir + "/node" + std::to_string(node) + ".log").c_str());
    return nullptr;
  }
  return last_json_line(out);
}

}  // namespace tessera::bench
