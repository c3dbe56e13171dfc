// The subcommands of `tessera`. Each adds itself to the app and returns the function that runs it.
#pragma once
#include <CLI/CLI.hpp>
#include <functional>

namespace tessera::cli {

struct Command {
  CLI::App* app;            // the subcommand; run() is called when it was parsed
  std::function<int()> run;  // returns the exit code
};

Command add_train_command(CLI::App& app);
Command add_eval_command(CLI::App& app);
Command add_generate_command(CLI::App& app);
Command add_bench_command(CLI::App& app);
Command add_run_command(CLI::App& app);
Command add_env_command(CLI::App& app);
Command add_doctor_command(CLI::App& app);
Command add_tune_command(CLI::App& app);
Command add_serve_command(CLI::App& app);
Command add_report_command(CLI::App& app);
Command add_trace_command(CLI::App& app);
Command add_data_command(CLI::App& app);
Command add_devices_command(CLI::App& app);
Command add_checkpoint_command(CLI::App& app);
Command add_plan_command(CLI::App& app);

}  // namespace tessera::cli
