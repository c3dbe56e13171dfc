// tessera report RUN_DIR: the run's HTML report (tessera/observe/run_report.h).
#include <cstdio>

#include "cli/commands.h"
#include "tessera/observe/run_report.h"

namespace tessera::cli {

Command add_report_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("report", "Write RUN_DIR/report.html: loss, accuracy, throughput, communication, memory");
  auto run_dir = std::make_shared<std::string>();
  auto output = std::make_shared<std::string>();
  cmd->add_option("run_dir", *run_dir, "A run's train.output_dir (it holds metrics.jsonl)")->required();
  cmd->add_option("-o,--output", *output, "Where to write the page (default RUN_DIR/report.html)");
  return {cmd, [=]() -> int {
    std::printf("%s\n", observe::write_run_report(*run_dir, *output).c_str());
    return 0;
  }};
}

}  // namespace tessera::cli
