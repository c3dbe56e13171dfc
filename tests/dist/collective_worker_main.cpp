// tessera_collective_worker: one rank of a real multi-process job, for the process-level tests
// (tier 3). Started by `tessera run`, mpirun or the tests' launch(); joins with
// init_process_group(--backend) and then, by --mode:
//   suite     every collective at --sizes, checked against the serial reference (exit 1 on failure)
//   absent    --victim never calls the collective; the others allreduce and must fail within
//             --timeout-ms naming the op, its number and the victim (exit 0 when they do)
//   die       --victim exits before the collective (its sockets close); the others must fail
//   mismatch  with TESSERA_DIST_DEBUG, --victim calls allreduce with one more element; every rank
//             must get the mismatch report
//   desync    (2 ranks, no debug mode) each rank calls broadcast naming the other as root, so both
//             wait to receive: the always-on collective check must fail both within seconds
// Expected errors are printed to stdout (one line per rank) so tests can read them.
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <unistd.h>

#include "dist/collective_suite.h"
#include "tessera/dist/init.h"
#include "tessera/dist/store/store_from_env.h"
#include "tessera/ops/ops.h"

using namespace tessera;

namespace {

// Runs allreduce #1 (after a successful #0) and reports how it failed. Returns the exit status.
int expect_failure(dist::ProcessGroup& group, const std::string& mode, int victim) {
  Tensor t = ones({16});
  group.allreduce(t)->wait();  // #0: everyone is connected
  if (group.rank() == victim) {
    if (mode == "die") ::_exit(0);  // gone without a goodbye: its sockets close
    if (mode == "absent") {
      // Never arrives at #1; stays alive (its sockets open) until the others have seen their error.
      std::vector<std::string> keys;
      for (int r = 0; r < group.size(); ++r)
        if (r != victim) keys.push_back("reported/" + std::to_string(r));
      dist::store_from_env(std::chrono::minutes(2))->wait(keys, std::chrono::minutes(2));
      return 0;
    }
  }
  Tensor u = ones({mode == "mismatch" && group.rank() == victim ? 17 : 16});
  auto start = std::chrono::steady_clock::now();
  try {
    if (mode == "desync") group.broadcast(u, (group.rank() + 1) % group.size())->wait();
    else group.allreduce(u)->wait();
    std::cout << "rank " << group.rank() << " UNEXPECTED SUCCESS" << std::endl;
    return 1;
  } catch (const TimeoutError& e) {
    std::cout << "TimeoutError " << e.what() << std::endl;
  } catch (const PeerFailureError& e) {
    std::cout << "PeerFailureError " << e.what() << std::endl;
  } catch (const ValueError& e) {
    std::cout << "ValueError " << e.what() << std::endl;
  }
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start).count();
  std::cout << "rank " << group.rank() << " failed after " << ms << " ms" << std::endl;
  if (mode == "absent") dist::store_from_env(std::chrono::minutes(2))->set("reported/" + std::to_string(group.rank()), "1");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("tessera_collective_worker");
  std::string backend = "gloo", mode = "suite";
  std::vector<int64_t> sizes;
  int timeout_ms = 60000, victim = 1;
  bool no_p2p = false;
  app.add_option("--backend", backend);
  app.add_option("--mode", mode)->check(CLI::IsMember({"suite", "absent", "die", "mismatch", "desync"}));
  app.add_option("--sizes", sizes);
  app.add_option("--timeout-ms", timeout_ms);
  app.add_option("--victim", victim);
  app.add_flag("--no-p2p", no_p2p);
  CLI11_PARSE(app, argc, argv);
  try {
    dist::InitOptions init;
    init.backend = backend;
    init.timeout = std::chrono::milliseconds(timeout_ms);
    if (mode == "mismatch") init.debug = true;
    auto group = dist::init_process_group(init);
    if (mode != "suite") return expect_failure(*group, mode, victim);
    testing::SuiteOptions suite;
    if (!sizes.empty()) suite.sizes = sizes;
    suite.point_to_point = !no_p2p;
    auto failures = testing::run_collective_suite(*group, suite);
    for (const auto& f : failures) std::cerr << f << "\n";
    std::cout << "rank " << group->rank() << " of " << group->size() << " (" << group->backend_name() << "): "
              << (failures.empty() ? "ok" : "FAILED") << std::endl;
    return failures.empty() ? 0 : 1;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << std::endl;
    return 2;
  }
}
