// tessera trace merge DIR: every rank's timeline (DIR/rank-*.json, written by `tessera train --trace`)
// on one timeline, DIR/timeline.json, for Perfetto or chrome://tracing. tessera trace analyze DIR:
// the flight records of a stuck or failed job, read together (dist/flight_report.h).
#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "cli/commands.h"
#include "tessera/core/error.h"
#include "tessera/dist/flight_report.h"
#include "tessera/io/atomic_file.h"
#include "tessera/observe/trace.h"

namespace tessera::cli {

Command add_trace_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("trace", "Timelines of a run (tessera train --trace)");
  cmd->require_subcommand(1);
  auto* merge = cmd->add_subcommand("merge", "Put every rank's trace of DIR on one timeline (DIR/timeline.json)");
  auto dir = std::make_shared<std::string>();
  auto output = std::make_shared<std::string>();
  merge->add_option("dir", *dir, "A run's trace directory (<output_dir>/trace)")->required();
  merge->add_option("-o,--output", *output, "Where to write the merged timeline");
  auto* analyze = cmd->add_subcommand("analyze", "Say which rank is missing from which collective, from the flight "
                                                  "records in DIR (<output_dir>/flight or TESSERA_FLIGHT_DIR)");
  auto flight_dir = std::make_shared<std::string>();
  analyze->add_option("dir", *flight_dir, "A directory of flight records (rank-*.json)")->required();
  return {cmd, [=]() -> int {
    if (analyze->parsed()) {
      std::printf("%s", dist::analyze_flight_records(dist::read_flight_records(*flight_dir)).c_str());
      return 0;
    }
    namespace fs = std::filesystem;
    TESSERA_CHECK(fs::is_directory(*dir), "[trace] ", *dir, " is not a directory: give a run's <output_dir>/trace");
    std::vector<std::string> files;
    for (const auto& e : fs::directory_iterator(*dir)) {
      const std::string name = e.path().filename().string();
      if (name.rfind("rank-", 0) == 0 && e.path().extension() == ".json") files.push_back(e.path().string());
    }
    std::sort(files.begin(), files.end());
    TESSERA_CHECK(!files.empty(), "[trace] ", *dir, " holds no rank-*.json: train with --trace first");
    const std::string out = output->empty() ? (fs::path(*dir) / "timeline.json").string() : *output;
    io::write_file_atomic(out, observe::merge_chrome_traces(files));
    std::printf("%s (%zu ranks; open it in https://ui.perfetto.dev or chrome://tracing)\n", out.c_str(), files.size());
    return 0;
  }};
}

}  // namespace tessera::cli
