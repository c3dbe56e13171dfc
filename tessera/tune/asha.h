// Asynchronous successive halving (ASHA, Li et al. 2020, "A System for Massively Parallel
// Hyperparameter Tuning"), the early stopping of Ray Tune's ASHAScheduler. Trials train in rungs of
// growing resource (epochs here): min_epochs, min_epochs·η, ..., up to max_epochs. When a worker is
// free, the highest rung with a trial in its top 1/η that was not promoted yet sends that trial one
// rung up; otherwise a new trial starts at the bottom. No rung ever waits for a full cohort, so no
// worker idles, and a bad trial stops after the bottom rung.
//
// The scheduler is the decision alone (no processes), so it is tested as a table of reports.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <vector>

namespace tessera::tune {

struct AshaOptions {
  int64_t min_epochs = 1, max_epochs = 9;
  int64_t eta = 3;        // keep the top 1/eta of each rung
  bool maximize = true;   // the metric (accuracy: true; loss: false)
};

class Asha {
 public:
  explicit Asha(AshaOptions options);
  // The epochs a trial has trained when it completes rung k: min·η^k, the last one max_epochs.
  const std::vector<int64_t>& rung_epochs() const { return rungs_; }
  // Trial `trial` completed rung `rung` with `metric` (NaN: it failed: never promoted).
  void report(int64_t trial, int rung, double metric);
  // The trial to send a rung up, and that rung; nullopt: start a new trial at rung 0 instead.
  // Marks the trial promoted.
  std::optional<std::pair<int64_t, int>> promote();
  // A restart: `trial` was already sent up from `rung` (its record at rung + 1 exists).
  void mark_promoted(int64_t trial, int rung) { promoted_.at(static_cast<size_t>(rung)).insert(trial); }
  // The best completed result of the highest rung any trial reached: {trial, rung, metric}.
  struct Best {
    int64_t trial = -1;
    int rung = -1;
    double metric = 0;
  };
  std::optional<Best> best() const;

 private:
  bool better(double a, double b) const { return options_.maximize ? a > b : a < b; }
  AshaOptions options_;
  std::vector<int64_t> rungs_;
  std::vector<std::vector<std::pair<int64_t, double>>> results_;  // per rung: (trial, metric), arrival order
  std::vector<std::set<int64_t>> promoted_;                      // per rung: trials sent up from it
};

}  // namespace tessera::tune
