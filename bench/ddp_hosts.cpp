// `tessera bench ddp --hosts H`: DDP across test hosts (scripts/cluster.sh: network namespaces
// joined by a bridge, each link shaped with tc), at each link rate and with each comm hook, so that
// it shows where compression starts to pay.
//
// Method: for each rate in --links ("unshaped" or a tc rate such as 1gbit), the cluster is made
// afresh; for each model and hook, `repeats` jobs of H hosts × nproc processes run the same timed
// loop as `tessera bench ddp` (one thread per process, fixed random batch, SGD with momentum),
// started in each host by `tessera run --nnodes H`. samples/s is global; scaling efficiency is
// against one process on this machine outside the hosts (same loop, batch and model); "vs none" is
// the hook's samples/s over the uncompressed run's at the same rate. Needs root (namespaces, veth, tc).
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "bench/bench.h"
#include "tessera/dist/launcher/job_token.h"

namespace tessera::bench {

namespace {

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

std::string quoted(const std::string& s) { return "'" + s + "'"; }

struct Hosts {
  std::string cluster;  // "env TESSERA_CLUSTER=NAME bash .../cluster.sh"
  bool up = false;
  Hosts(const std::string& name, int hosts, const std::string& link, const std::string& log) {
    cluster = "env TESSERA_CLUSTER=" + name + " bash " + quoted(std::string(TESSERA_SOURCE_DIR) + "/scripts/cluster.sh");
    std::string cmd = cluster + " up " + std::to_string(hosts) + (link == "unshaped" ? "" : " --link " + link) + " > " + log + " 2>&1";
    up = std::system(cmd.c_str()) == 0;
  }
  ~Hosts() { std::system((cluster + " down > /dev/null 2>&1").c_str()); }
};

// One job across the hosts; rank 0's JSON line, or null (its log printed) when it failed.
nlohmann::json run_across(const Hosts& hosts, const DdpBenchOptions& o, const std::string& model, const std::string& hook,
                          const std::string& dir, const std::string& token) {
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  std::string script = "export TESSERA_JOB_TOKEN=" + token + " TESSERA_NUM_THREADS=1; ";
  for (int node = 0; node < o.hosts; ++node) {
    script += "timeout -k 5 600 " + hosts.cluster + " exec host" + std::to_string(node + 1) + " " + quoted(self) + " run --nnodes " +
              std::to_string(o.hosts) + " --node-rank " + std::to_string(node) + " --nproc-per-node " + std::to_string(o.nproc) +
              " --master-addr 198.18.0.1 --master-port 29500 -- " + quoted(self) +
              " bench ddp --worker --models " + model + " --batch " + std::to_string(o.batch) + " --steps " +
              std::to_string(o.steps) + " --warmup " + std::to_string(o.warmup) + " --backend " + o.backend + " --comm-hook " +
              hook + " > " + dir + "/node" + std::to_string(node) + ".log 2>&1 & p" + std::to_string(node) + "=$!; ";
  }
  script += "s=0; for p in";
  for (int node = 0; node < o.hosts; ++node) script += " $p" + std::to_string(node);
  script += "; do wait $p || s=1; done; exit $s";
  std::ofstream(dir + "/job.sh") << script << "\n";
  const int rc = std::system(("bash " + dir + "/job.sh").c_str());
  const std::string out = read_all(dir + "/node0.log");
  if (rc != 0) {
    std::fprintf(stderr, "bench ddp: the job across %d hosts failed (%s, %s):\n%s%s", o.hosts, model.c_str(), hook.c_str(), out.c_str(),
                 read_all(dir + "/node1.log").c_str());
    return nullptr;
  }
  return last_json_line(out);
}

}  // namespace

int ddp_across_hosts(const DdpBenchOptions& o, const std::function<nlohmann::json(const std::string& model)>& one_process) {
  if (::geteuid() != 0) {
    std::fprintf(stderr, "bench ddp --hosts: test hosts need root (network namespaces, veth, tc)\n");
    return 2;
  }
  char tmpl[] = "/tmp/tessera_bench_hosts_XXXXXX";
  if (::mkdtemp(tmpl) == nullptr) return 2;
  const std::string dir = tmpl;
  const std::string token = dist::launcher::random_job_token();
  const auto models = split_list(o.models), hooks = split_list(o.comm_hooks), links = split_list(o.links);
  std::printf("tessera bench ddp: %d hosts x %d processes x 1 thread, batch %d per process, %d steps after %d warm-up, median "
              "[min-max] of %d repeats; backend %s; efficiency against one process outside the hosts\n",
              o.hosts, o.nproc, o.batch, o.steps, o.warmup, o.repeats, o.backend.c_str());
  std::map<std::string, double> single;
  for (const auto& model : models) {
    std::vector<double> runs;
    for (int r = 0; r < o.repeats; ++r) {
      nlohmann::json j = one_process(model);
      if (!j.is_null()) runs.push_back(j["samples_per_s"]);
    }
    single[model] = runs.empty() ? 0.0 : median(runs);
    std::printf("one process, %s: %s samples/s\n", model.c_str(), median_cell(runs).c_str());
  }
  std::printf("%-9s %-5s %-9s %-24s %-11s %-9s %-10s %s\n", "link", "model", "hook", "samples/s", "bytes/step", "comm ms",
              "efficiency", "vs none");
  int failures = 0;
  const std::string name = "b" + std::to_string(::getpid() % 100000);
  for (const auto& link : links) {
    Hosts hosts(name, o.hosts, link, dir + "/cluster.log");
    if (!hosts.up) {
      std::fprintf(stderr, "bench ddp: could not make %d test hosts at link %s:\n%s", o.hosts, link.c_str(),
                   read_all(dir + "/cluster.log").c_str());
      ++failures;
      continue;
    }
    for (const auto& model : models) {
      double uncompressed = 0.0;
      for (const auto& hook : hooks) {
        std::vector<double> runs, comm;
        double bytes = 0;
        for (int r = 0; r < o.repeats; ++r) {
          nlohmann::json j = run_across(hosts, o, model, hook, dir, token);
          if (j.is_null()) {
            ++failures;
            continue;
          }
          runs.push_back(j["samples_per_s"]);
          comm.push_back(j["comm_ms"]);
          bytes = j["bytes_per_step"];
        }
        const double rate = runs.empty() ? 0.0 : median(runs);
        if (hook == "none") uncompressed = rate;
        char eff[32] = "-", vs[32] = "-", c[32] = "-";
        if (rate > 0 && single[model] > 0)
          std::snprintf(eff, sizeof eff, "%.0f%%", 100.0 * rate / (single[model] * o.hosts * o.nproc));
        if (rate > 0 && uncompressed > 0) std::snprintf(vs, sizeof vs, "%.2fx", rate / uncompressed);
        if (!comm.empty()) std::snprintf(c, sizeof c, "%.2f", median(comm));
        std::printf("%-9s %-5s %-9s %-24s %-11.0f %-9s %-10s %s\n", link.c_str(), model.c_str(), hook.c_str(),
                    median_cell(runs).c_str(), bytes, c, eff, vs);
        std::fflush(stdout);
      }
    }
  }
  std::filesystem::remove_all(dir);
  return failures == 0 ? 0 : 1;
}

}  // namespace tessera::bench
