// What a run shows while it trains: a progress bar on a terminal (samples/s, loss, ETA), plain log
// lines otherwise, and every metric appended as a JSON line to <output_dir>/metrics.jsonl.
#pragma once
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

namespace tessera::train {

class MetricsLog {
 public:
  explicit MetricsLog(const std::string& path);  // appends; IoError naming the path if it can't
  ~MetricsLog();
  MetricsLog(const MetricsLog&) = delete;
  MetricsLog& operator=(const MetricsLog&) = delete;
  void write(const nlohmann::json& record);  // one line, flushed

 private:
  std::FILE* file_;
  std::string path_;
};

// The end of an epoch as both trainers report it: the metrics.jsonl record and the log line
// (validation loss and perplexity for the language model, test loss and accuracy otherwise).
struct EpochReport {
  nlohmann::json record;
  std::string summary;
};
EpochReport epoch_report(int64_t epoch, int64_t step, double train_loss, double eval_loss, double eval_accuracy,
                         double epoch_seconds, bool language_model);

class Progress {
 public:
  // interactive: draw a bar (a terminal); otherwise print a line every `log_every` steps.
  Progress(bool interactive, int64_t log_every);
  void start_epoch(int64_t epoch, int64_t epochs, int64_t batches, int64_t first_batch);
  void step(int64_t batch, int64_t global_step, double loss, double lr, double samples_per_s);
  void end_epoch(const std::string& summary);
  static bool stderr_is_terminal();

 private:
  bool interactive_;
  int64_t log_every_;
  int64_t epoch_ = 0, epochs_ = 0, batches_ = 0, first_batch_ = 0;
  std::chrono::steady_clock::time_point epoch_start_;
};

}  // namespace tessera::train
