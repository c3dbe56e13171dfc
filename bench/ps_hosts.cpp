// `tessera bench ps --hosts H`: the parameter-server modes against DDP across test hosts
// (scripts/cluster.sh), at each link rate. Each host runs `workers` workers and, for the PS modes,
// `servers` servers, so every worker reaches the other host's servers over the link and DDP's
// all-reduce crosses it too. Same timed loop and figures as `tessera bench ps` (ps.cpp): samples/s
// summed over workers, bytes/step of worker 0, and each mode against DDP at the same rate. The
// bag-of-words model shows what the link does to all-reduce of a 1M-row table's gradient against
// the ~2,000 rows a batch touches. Needs root (namespaces, veth, tc).
#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include "bench/bench.h"
#include "bench/test_hosts.h"
#include "tessera/dist/launcher/job_token.h"

namespace tessera::bench {

int ps_across_hosts(const PsBenchOptions& o) {
  if (::geteuid() != 0) {
    std::fprintf(stderr, "bench ps --hosts: test hosts need root (network namespaces, veth, tc)\n");
    return 2;
  }
  char tmpl[] = "/tmp/tessera_bench_ps_hosts_XXXXXX";
  if (::mkdtemp(tmpl) == nullptr) return 2;
  const std::string dir = tmpl, token = dist::launcher::random_job_token();
  std::printf("tessera bench ps: %d hosts x (%d workers + %d servers for PS) x 1 thread, batch %d per worker, "
              "SGD(momentum 0.9), %d steps after %d warm-up, median [min-max] of %d repeats; bow: %lld rows\n",
              o.hosts, o.workers, o.servers, o.batch, o.steps, o.warmup, o.repeats, static_cast<long long>(o.vocab));
  std::printf("%-9s %-5s %-6s %-26s %-14s %s\n", "link", "model", "mode", "samples/s", "bytes/step", "vs ddp");
  int failures = 0;
  const std::string name = "p" + std::to_string(::getpid() % 100000);
  for (const auto& link : split_list(o.links)) {
    TestHosts hosts(name, o.hosts, link, dir + "/cluster.log");
    if (!hosts.up) {
      std::fprintf(stderr, "bench ps: could not make %d test hosts at link %s:\n%s", o.hosts, link.c_str(),
                   read_all(dir + "/cluster.log").c_str());
      ++failures;
      continue;
    }
    for (const auto& model : split_list(o.models)) {
      double ddp_rate = 0;
      for (const auto& mode : split_list(o.modes)) {
        const std::string roles = mode == "ddp" ? "--nproc-per-node " + std::to_string(o.workers)
                                                : "--workers " + std::to_string(o.workers) + " --servers " +
                                                      std::to_string(o.servers);
        const std::string args = "bench ps --worker --models " + model + " --modes " + mode + " --batch " +
                                 std::to_string(o.batch) + " --steps " + std::to_string(o.steps) + " --warmup " +
                                 std::to_string(o.warmup) + " --vocab " + std::to_string(o.vocab) + " --staleness " +
                                 std::to_string(o.staleness);
        std::vector<double> rates;
        double bytes = 0;
        for (int r = 0; r < o.repeats; ++r) {
          nlohmann::json j = run_on_hosts(hosts, roles, args, dir, token, model + ", " + mode + ", " + link);
          if (j.is_null()) {
            ++failures;
            continue;
          }
          rates.push_back(j["samples_per_s"]);
          bytes = j["bytes_per_step"];
        }
        if (mode == "ddp") ddp_rate = rates.empty() ? 0.0 : median(rates);
        char ratio[32] = "-";
        if (ddp_rate > 0 && !rates.empty()) std::snprintf(ratio, sizeof ratio, "%.2fx", median(rates) / ddp_rate);
        std::printf("%-9s %-5s %-6s %-26s %-14.0f %s\n", link.c_str(), model.c_str(), mode.c_str(),
                    median_cell(rates).c_str(), bytes, ratio);
        std::fflush(stdout);
      }
    }
  }
  std::filesystem::remove_all(dir);
  return failures == 0 ? 0 : 1;
}

}  // namespace tessera::bench
