// BackgroundSaver: train.checkpoint_async. The training thread copies the state to host memory,
// hands the save over and goes on with the next step; a thread of the saver's writes, fsyncs and
// reads it back (io::save_checkpoint), so the step directory still appears only when whole. One save
// at a time: handing over the next first waits for the last, so besides the live state at most one
// copy is held. A save that failed fails the job at the trainer's next step (check) or when it waits
// for the last save (wait), with the error naming the files; the previous checkpoint stays `latest`.
#pragma once
#include <functional>
#include <future>
#include <string>

namespace tessera::train {

class BackgroundSaver {
 public:
  BackgroundSaver() = default;
  ~BackgroundSaver();  // waits for the save in flight; a failure there is printed, not thrown
  BackgroundSaver(const BackgroundSaver&) = delete;
  BackgroundSaver& operator=(const BackgroundSaver&) = delete;

  // Waits for the previous save (rethrowing its failure), then starts `save`, which returns the
  // step directory it wrote.
  void submit(std::function<std::string()> save);
  // Rethrows the failure of a save that has finished; returns at once while one is in flight.
  void check();
  // Waits for the save in flight, if any; rethrows its failure; returns its step directory ("" when none).
  std::string wait();
  bool busy() const { return in_flight_.valid(); }

 private:
  std::future<std::string> in_flight_;
};

}  // namespace tessera::train
