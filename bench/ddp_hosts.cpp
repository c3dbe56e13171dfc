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
#include "bench/test_hosts.h"
#include "tessera/dist/launcher/job_token.h"

namespace tessera::bench {

namespace {

// One job across the hosts; rank 0's JSON line, or null (the logs printed) when it failed.
nlohmann::json run_across(const TestHosts& hosts, const DdpBenchOptions& o, const std::string& model,
                          const std::string& hook, const std::string& dir, const std::string& token) {
  return run_on_hosts(hosts, "--nproc-per-node " + std::to_string(o.nproc),
                      "bench ddp --worker --models " + model + " --batch " + std::to_string(o.batch) + " --steps " +
                          std::to_string(o.steps) + " --warmup " + std::to_string(o.warmup) + " --backend " + o.backend +
                          " --comm-hook " + hook,
                      dir, token, model + ", " + hook);
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
    TestHosts hosts(name, o.hosts, link, dir + "/cluster.log");
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
