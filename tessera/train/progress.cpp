#include "tessera/train/progress.h"

#include <cmath>

#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "tessera/core/error.h"

namespace tessera::train {

MetricsLog::MetricsLog(const std::string& path) : path_(path) {
  file_ = std::fopen(path.c_str(), "a");
  if (!file_) throw IoError("[metrics] cannot open " + path + " for appending: " + std::strerror(errno));
}

MetricsLog::~MetricsLog() {
  if (file_) std::fclose(file_);
}

void MetricsLog::write(const nlohmann::json& record) {
  std::string line = record.dump() + "\n";
  if (std::fwrite(line.data(), 1, line.size(), file_) != line.size() || std::fflush(file_) != 0)
    throw IoError("[metrics] cannot write to " + path_ + ": " + std::strerror(errno));
}

Progress::Progress(bool interactive, int64_t log_every) : interactive_(interactive), log_every_(log_every) {}

bool Progress::stderr_is_terminal() { return ::isatty(STDERR_FILENO) == 1; }

void Progress::start_epoch(int64_t epoch, int64_t epochs, int64_t batches, int64_t first_batch) {
  epoch_ = epoch;
  epochs_ = epochs;
  batches_ = batches;
  first_batch_ = first_batch;
  epoch_start_ = std::chrono::steady_clock::now();
}

void Progress::step(int64_t batch, int64_t global_step, double loss, double lr, double samples_per_s) {
  const int64_t done = batch + 1;
  double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - epoch_start_).count();
  double per_batch = done > first_batch_ ? elapsed / static_cast<double>(done - first_batch_) : 0.0;
  double eta = per_batch * static_cast<double>(batches_ - done);
  if (interactive_) {
    constexpr int kWidth = 30;
    int filled = batches_ > 0 ? static_cast<int>(kWidth * done / batches_) : kWidth;
    std::string bar(filled, '#');
    bar.resize(kWidth, '.');
    std::fprintf(stderr, "\repoch %lld/%lld [%s] %lld/%lld  loss %.4f  %.0f samples/s  ETA %.0fs   ",
                 static_cast<long long>(epoch_ + 1), static_cast<long long>(epochs_), bar.c_str(),
                 static_cast<long long>(done), static_cast<long long>(batches_), loss, samples_per_s, eta);
    std::fflush(stderr);
  } else if (global_step % log_every_ == 0 || done == batches_) {
    std::fprintf(stderr, "epoch %lld/%lld step %lld batch %lld/%lld loss %.4f lr %.3g %.0f samples/s ETA %.0fs\n",
                 static_cast<long long>(epoch_ + 1), static_cast<long long>(epochs_),
                 static_cast<long long>(global_step), static_cast<long long>(done), static_cast<long long>(batches_),
                 loss, lr, samples_per_s, eta);
  }
}

void Progress::end_epoch(const std::string& summary) {
  if (interactive_) std::fprintf(stderr, "\n");
  std::fprintf(stderr, "%s\n", summary.c_str());
}

EpochReport epoch_report(int64_t epoch, int64_t step, double train_loss, double eval_loss, double eval_accuracy,
                         double epoch_seconds, bool language_model) {
  EpochReport r;
  r.record = {{"type", "epoch"}, {"epoch", epoch}, {"step", step}, {"train_loss", train_loss},
              {"eval_loss", eval_loss}, {"epoch_seconds", epoch_seconds}};
  char summary[256];
  if (language_model) {
    r.record["eval_perplexity"] = std::exp(eval_loss);
    std::snprintf(summary, sizeof summary, "epoch %lld: train loss %.4f, validation loss %.4f (perplexity %.2f), %.1fs",
                  static_cast<long long>(epoch), train_loss, eval_loss, std::exp(eval_loss), epoch_seconds);
  } else if (std::isnan(eval_accuracy)) {  // a regression: the loss is the mean squared error
    std::snprintf(summary, sizeof summary, "epoch %lld: train loss %.4f, test loss (MSE) %.4f, %.1fs",
                  static_cast<long long>(epoch), train_loss, eval_loss, epoch_seconds);
  } else {
    r.record["eval_accuracy"] = eval_accuracy;
    std::snprintf(summary, sizeof summary, "epoch %lld: train loss %.4f, test loss %.4f, test accuracy %.2f%%, %.1fs",
                  static_cast<long long>(epoch), train_loss, eval_loss, 100.0 * eval_accuracy, epoch_seconds);
  }
  r.summary = summary;
  return r;
}

}  // namespace tessera::train
