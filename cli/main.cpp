// The `tessera` command. Library errors are exceptions; this is the one place they become messages
// and exit codes (3: a configuration or input error, which a restart would repeat; 1: any other
// tessera error, e.g. a peer or the network failed; 2: anything unexpected).
#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>

#include "cli/commands.h"
#include "tessera/core/error.h"
#include "tessera/dist/launcher/env.h"
#include "tessera/dist/live_membership.h"
#include "tessera/util/thread_pool.h"

int main(int argc, char** argv) {
  CLI::App app{"tessera: distributed deep-learning training in C++"};
  app.require_subcommand(1);
  int threads = 0;
  app.add_option("--threads", threads, "Intra-op threads (also bounds OpenBLAS and oneDNN); default TESSERA_NUM_THREADS or all cores")
      ->check(CLI::Range(1, 1024));
  const std::vector<tessera::cli::Command> commands{
      tessera::cli::add_train_command(app), tessera::cli::add_eval_command(app),
      tessera::cli::add_generate_command(app), tessera::cli::add_bench_command(app),
      tessera::cli::add_run_command(app), tessera::cli::add_env_command(app),
      tessera::cli::add_doctor_command(app), tessera::cli::add_tune_command(app),
      tessera::cli::add_serve_command(app), tessera::cli::add_report_command(app),
      tessera::cli::add_trace_command(app), tessera::cli::add_data_command(app),
      tessera::cli::add_devices_command(app), tessera::cli::add_checkpoint_command(app),
      tessera::cli::add_plan_command(app)};
  CLI11_PARSE(app, argc, argv);
  try {
    if (threads > 0) tessera::set_num_threads(threads);
    else tessera::init_threads_from_env();
    for (const auto& command : commands)
      if (command.app->parsed()) return command.run();
  } catch (const tessera::ValueError& e) {
    // A configuration or input error: the launchers do not retry it (dist/launcher/env.h).
    std::fprintf(stderr, "tessera: error: %s\n", e.what());
    return tessera::dist::launcher::kConfigErrorExitStatus;
  } catch (const tessera::dist::LiveStateLost& e) {
    // The launcher fails the job rather than going on live without this worker (env.h).
    std::fprintf(stderr, "tessera: error: %s\n", e.what());
    return tessera::dist::launcher::kLiveStateLostExitStatus;
  } catch (const tessera::Error& e) {
    std::fprintf(stderr, "tessera: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tessera: unexpected error: %s\n", e.what());
    return 2;
  }
  return 0;
}
