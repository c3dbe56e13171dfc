// tessera run --nproc-per-node N [--nnodes K --node-rank I --master-addr A --master-port P]
//             [--timeout SECONDS] [--grace-period SECONDS] -- PROGRAM ARGS...
// tessera run --servers S --workers W [...] -- PROGRAM ARGS...   (a parameter-server job)
// The launcher lives in tessera/dist/launcher; this file only maps flags to LaunchOptions and the
// result to a message and an exit code.
#include <chrono>
#include <cmath>
#include <cstdio>

#include "cli/commands.h"
#include "tessera/dist/launcher/launcher.h"

namespace tessera::cli {

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
  cmd->add_option("--nnodes", options->nnodes, "Nodes in the job (one launcher per node)")
      ->default_val(1)
      ->check(CLI::PositiveNumber);
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
  cmd->add_option("command", options->command, "PROGRAM ARGS... (after --)")->required();
  return {cmd, [=]() -> int {
    dist::launcher::LaunchOptions o = *options;
    o.timeout = to_ms(*timeout_s);
    o.grace_period = to_ms(*grace_s);
    dist::launcher::LaunchResult result = dist::launcher::launch(o);
    if (!result.message.empty()) std::fprintf(stderr, "tessera run: %s\n", result.message.c_str());
    return result.exit_code;
  }};
}

}  // namespace tessera::cli
