#include "tessera/dist/flight_recorder.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <thread>

#include "tessera/core/error.h"
#include "tessera/dist/process_group.h"
#include "tessera/util/settings.h"

namespace tessera::dist {

namespace {

std::mutex dir_mutex;
std::string configured_dir;

std::atomic<int> signal_pipe_write{-1};

void on_sigusr2(int) {
  const int fd = signal_pipe_write.load();
  if (fd >= 0) {
    const char byte = 1;
    [[maybe_unused]] ssize_t n = ::write(fd, &byte, 1);
  }
}

}  // namespace

FlightRecorder::FlightRecorder(size_t capacity) : capacity_(capacity) {}

FlightEntry* FlightRecorder::find(uint64_t sequence) {
  for (auto it = ring_.rbegin(); it != ring_.rend(); ++it)
    if (it->sequence == sequence) return &*it;
  return nullptr;
}

void FlightRecorder::queued(uint64_t sequence, CallTextPtr call, int64_t now_us) {
  TESSERA_ASSERT(call != nullptr, "a flight entry without its call");
  std::lock_guard<std::mutex> lock(mutex_);
  ring_.push_back({sequence, std::move(call), now_us, 0, 0, ""});
  if (ring_.size() > capacity_) ring_.pop_front();
}

void FlightRecorder::started(uint64_t sequence, int64_t now_us) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (FlightEntry* e = find(sequence)) e->started_us = now_us;
}

void FlightRecorder::finished(uint64_t sequence, int64_t now_us, const std::string& error) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (FlightEntry* e = find(sequence)) {
    e->finished_us = now_us;
    if (!error.empty()) e->error = error.substr(0, 2000);
  }
}

nlohmann::json FlightRecorder::entries() const {
  std::lock_guard<std::mutex> lock(mutex_);
  nlohmann::json out = nlohmann::json::array();
  for (const auto& e : ring_) {
    const char* state = e.finished_us ? (e.error.empty() ? "done" : "failed") : e.started_us ? "running" : "queued";
    out.push_back({{"sequence", e.sequence}, {"op", e.call->op}, {"description", e.call->description(e.sequence)},
                   {"state", state}, {"queued_us", e.queued_us}, {"started_us", e.started_us},
                   {"finished_us", e.finished_us}, {"error", e.error}, {"call_site", e.call->call_site}});
  }
  return out;
}

std::vector<FlightEntry> FlightRecorder::newest(size_t count) const {
  std::lock_guard<std::mutex> lock(mutex_);
  const size_t first = ring_.size() > count ? ring_.size() - count : 0;
  return {ring_.begin() + static_cast<std::ptrdiff_t>(first), ring_.end()};
}

std::string flight_recorder_dir() {
  if (const char* d = env_setting("TESSERA_FLIGHT_DIR")) return d;
  std::lock_guard<std::mutex> lock(dir_mutex);
  return configured_dir;
}

void set_flight_recorder_dir(const std::string& dir) {
  std::lock_guard<std::mutex> lock(dir_mutex);
  configured_dir = dir;
}

void install_flight_recorder_signal() {
  static std::once_flag once;
  std::call_once(once, [] {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) return;
    signal_pipe_write = fds[1];
    struct sigaction sa {};
    sa.sa_handler = on_sigusr2;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    ::sigaction(SIGUSR2, &sa, nullptr);
    std::thread([read_fd = fds[0]] {
      for (;;) {
        char byte;
        const ssize_t n = ::read(read_fd, &byte, 1);
        if (n > 0) ProcessGroup::dump_all_flight_records("SIGUSR2");
        else if (n < 0 && errno == EINTR) continue;
        else return;
      }
    }).detach();  // lives as long as the process: a signal may come at any time
  });
}

}  // namespace tessera::dist
