// tessera run --nproc-per-node N [--nnodes K --node-rank I --master-addr A --master-port P]
//             [--timeout SECONDS] [--grace-period SECONDS] -- PROGRAM ARGS...
// tessera run --servers S --workers W [...] -- PROGRAM ARGS...   (a parameter-server job)
// tessera run --nnodes MIN:MAX --nproc-per-node N --rdzv-backend store|etcd --rdzv-endpoint HOST:PORT[,HOST:PORT...]
//             --rdzv-id JOB --max-restarts R -- PROGRAM ARGS...     (an elastic job: tessera/elastic)
// The launcher lives in tessera/dist/launcher; this file only maps flags to LaunchOptions and the
// result to a message and an exit code.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <tuple>
#include <unistd.h>

#include "cli/commands.h"
#include "tessera/dist/launcher/launcher.h"
#include "tessera/dist/launcher/slurm_env.h"
#include "tessera/dist/net/interface.h"
#include "tessera/dist/slurm_job.h"
#include "tessera/elastic/elastic_agent.h"

namespace tessera::cli {

namespace {

// This program's path, to start `tessera doctor` with the same binary.
std::string self_executable() {
  char path[4096] = {};
  const ssize_t n = ::readlink("/proc/self/exe", path, sizeof(path) - 1);
  return n > 0 ? std::string(path, static_cast<size_t>(n)) : std::string("tessera");
}

}  // namespace

namespace {
std::chrono::milliseconds to_ms(double seconds) {
  return std::chrono::milliseconds(static_cast<long long>(std::llround(seconds * 1000.0)));
}
}  // namespace

Command add_run_command(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "run", "Start N worker processes of PROGRAM with RANK, WORLD_SIZE, MASTER_ADDR/PORT, ... set "
             "(see tessera/dist/launcher/env.h); the job fails, and stops, when one worker fails. With --servers S "
             "also S parameter servers per node (TESSERA_ROLE=server); then only a failing server stops the job");
  auto options = std::make_shared<dist::launcher::LaunchOptions>();
  auto timeout_s = std::make_shared<double>(0.0);
  auto grace_s = std::make_shared<double>(5.0);
  auto* nproc = cmd->add_option("--nproc-per-node", options->nproc_per_node, "Workers on this node")
                    ->check(CLI::Range(1, 4096));
  auto* workers = cmd->add_option("--workers", options->nproc_per_node, "Workers on this node (as --nproc-per-node)")
                      ->check(CLI::Range(1, 4096))
                      ->excludes(nproc);
  cmd->add_option("--servers", options->servers_per_node,
                  "Parameter servers on this node: a parameter-server job, where a failing worker does not stop "
                  "the job")
      ->check(CLI::Range(1, 4096));
  // Exactly one of the two synonyms; checked after parsing, so the message can name both.
  cmd->callback([nproc, workers] {
    if (nproc->count() + workers->count() == 0)
      throw CLI::RequiredError("--workers (or its synonym --nproc-per-node)");
  });
  auto nnodes = std::make_shared<std::string>("1");
  auto elastic = std::make_shared<elastic::ElasticOptions>();
  auto heartbeat_s = std::make_shared<double>(10.0);
  auto last_call_s = std::make_shared<double>(1.0);
  auto join_timeout_s = std::make_shared<double>(60.0);
  cmd->add_option("--nnodes", *nnodes,
                  "Nodes in the job (one launcher per node), or MIN:MAX for an elastic job (tessera/elastic)")
      ->default_val("1");
  auto* backend = cmd->add_option("--rdzv-backend", elastic->backend,
                                  "Elastic job: where the agents meet: store (the embedded store, hosted by the first "
                                  "agent at --rdzv-endpoint) or etcd (an etcd server's client URL)")
                      ->check(CLI::IsMember({"store", "etcd"}));
  auto* endpoint = cmd->add_option("--rdzv-endpoint", elastic->endpoint,
                                   "Elastic job: HOST:PORT of the rendezvous; with etcd, every member's, comma-separated");
  auto* rdzv_id = cmd->add_option("--rdzv-id", elastic->run_id, "Elastic job: the job's id at the endpoint");
  auto* restarts = cmd->add_option("--max-restarts", elastic->max_restarts,
                                   "Elastic job: worker or agent failures the job survives (default 3)")
                       ->check(CLI::NonNegativeNumber);
  cmd->add_option("--heartbeat-timeout", *heartbeat_s,
                  "Elastic job: seconds of silence after which a worker (stalled) or an agent (lost) counts as failed")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--last-call", *last_call_s,
                  "Elastic job: a rendezvous with at least MIN agents closes after this many seconds without a new one")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--join-timeout", *join_timeout_s,
                  "Elastic job: seconds to wait for MIN agents before the job fails")
      ->check(CLI::PositiveNumber);
  auto straggler_s = std::make_shared<double>(2.0);
  cmd->add_option("--straggler-window", *straggler_s,
                  "Elastic job: seconds per window of the straggler check (a rank late in 3 windows in a row is named)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--local-addr", elastic->local_addr,
                  "Elastic job: the address this machine's workers' store listens on when it is node 0; default: "
                  "loopback for a rendezvous on loopback, else the interface that reaches the rendezvous");
  cmd->add_option("--node-rank", options->node_rank, "This node's index, 0 hosts the rendezvous store")
      ->default_val(0)
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--master-addr", options->master_addr, "Address of node 0")->default_val("127.0.0.1");
  cmd->add_option("--master-port", options->master_port, "Port of node 0's store; default: a free port (node 0 only)")
      ->check(CLI::Range(0, 65535));
  cmd->add_option("--timeout", *timeout_s, "Stop the job after this many seconds (exit 124); default: none")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--grace-period", *grace_s,
                  "Seconds workers get to exit after SIGTERM or a forwarded signal before SIGKILL")
      ->default_val(5.0)
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--live-replacements", options->live_replacements,
                  "A live job (distributed.live_membership): processes this launcher may start in lost workers' "
                  "slots, each joining the running job (default 0: it goes on with fewer). An elastic job replaces "
                  "within --max-restarts")
      ->check(CLI::NonNegativeNumber);
  auto iface = std::make_shared<std::string>();
  cmd->add_option("--iface", *iface,
                  "Network interface whose address the workers advertise to the other hosts (sets "
                  "TESSERA_SOCKET_IFNAME); default: the one that routes to --master-addr");
  auto preflight = std::make_shared<bool>(false);
  cmd->add_flag("--preflight", *preflight,
                "Before the job, run `tessera doctor` on the same nodes (its store on --master-port + 1): measure "
                "every link between the hosts and name a slow one");
  cmd->add_option("command", options->command, "PROGRAM ARGS... (after --)")->required();
  return {cmd, [=]() -> int {
    // The workers inherit the launcher's environment: the interface travels as the setting itself.
    if (!iface->empty()) ::setenv("TESSERA_SOCKET_IFNAME", iface->c_str(), 1);
    const bool is_elastic = nnodes->find(':') != std::string::npos || backend->count() || endpoint->count() ||
                            rdzv_id->count() || restarts->count();
    if (is_elastic) {
      elastic::ElasticOptions e = *elastic;
      std::tie(e.min_nodes, e.max_nodes) = elastic::parse_nnodes(*nnodes);
      e.nproc_per_node = options->nproc_per_node;
      e.command = options->command;
      e.grace_period = to_ms(*grace_s);
      e.heartbeat_timeout = to_ms(*heartbeat_s);
      e.last_call = to_ms(*last_call_s);
      e.join_timeout = to_ms(*join_timeout_s);
      e.straggler_window = to_ms(*straggler_s);
      if (!dist::launcher::has_rank()) {
        // Under srun, one agent per node: an endpoint named by a node's hostname, which that node's
        // own resolver maps to loopback (Debian's 127.0.1.1), means there the address the other
        // nodes reach it at, or the agents would meet apart.
        if (auto step = dist::launcher::slurm_step_from_environment();
            step && step->nnodes > 1 && e.endpoint.find(',') == std::string::npos) {
          auto [host, port] = elastic::parse_endpoint(e.endpoint);
          const bool a_name = host.find_first_not_of("0123456789.") != std::string::npos && host != "localhost";
          if (a_name && dist::detail::resolve_ipv4(host, "the --rdzv-endpoint host").rfind("127.", 0) == 0)
            e.endpoint = dist::slurm_store_host(*step, host) + ":" + std::to_string(port);
        }
      }
      elastic::ElasticResult result = elastic::run_elastic(e);
      if (!result.message.empty()) std::fprintf(stderr, "tessera run: %s\n", result.message.c_str());
      return result.exit_code;
    }
    dist::launcher::LaunchOptions o = *options;
    o.nnodes = elastic::parse_nnodes(*nnodes).first;
    if (cmd->count("--nnodes") + cmd->count("--node-rank") == 0 && !dist::launcher::has_rank()) {
      // Started by srun, one launcher per node of an allocation: the nodes, this node's index and the
      // master come from Slurm unless given (tessera/dist/launcher/slurm_env.h).
      if (auto step = dist::launcher::slurm_step_from_environment()) {
        const auto place = dist::launcher::launcher_place_from_slurm(*step, dist::launcher::slurm_environment());
        o.nnodes = place.nnodes;
        o.node_rank = place.node_rank;
        if (cmd->count("--master-addr") == 0)
          o.master_addr = place.node_rank == 0 ? dist::slurm_store_host(*step, place.master_addr) : place.master_addr;
        if (cmd->count("--master-port") == 0) o.master_port = place.master_port;
      }
    }
    o.timeout = to_ms(*timeout_s);
    o.grace_period = to_ms(*grace_s);
    if (*preflight) {
      // A job of its own, one worker per node, on another port: the two jobs' stores never meet
      // even when one node finishes the preflight before another.
      dist::launcher::LaunchOptions check = o;
      check.nproc_per_node = 1;
      check.servers_per_node = 0;
      if (check.master_port > 0) ++check.master_port;
      check.command = {self_executable(), "doctor"};
      dist::launcher::LaunchResult checked = dist::launcher::launch(check);
      if (checked.exit_code != 0) {
        std::fprintf(stderr, "tessera run: the preflight failed (%s); the job was not started\n", checked.message.c_str());
        return checked.exit_code;
      }
    }
    dist::launcher::LaunchResult result = dist::launcher::launch(o);
    if (!result.message.empty()) std::fprintf(stderr, "tessera run: %s\n", result.message.c_str());
    return result.exit_code;
  }};
}

}  // namespace tessera::cli
