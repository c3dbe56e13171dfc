#include "tessera/train/survivor_save.h"

#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>

#include "tessera/core/error.h"
#include "tessera/dist/launcher/env.h"
#include "tessera/util/settings.h"

namespace tessera::train {

namespace {

std::atomic<int> wake_fd{-1};
constexpr char kSaveByte = 's', kStopByte = 'q';

extern "C" void on_save_signal(int) {
  const int fd = wake_fd.load();
  if (fd >= 0) {
    const char b = kSaveByte;
    [[maybe_unused]] ssize_t n = ::write(fd, &b, 1);  // async-signal-safe
  }
}

}  // namespace

std::unique_ptr<SurvivorSave> SurvivorSave::from_environment(int rank, std::function<std::string()> save) {
  if (!env_setting(dist::launcher::kElasticGenerationVariable)) return nullptr;
  return std::unique_ptr<SurvivorSave>(new SurvivorSave(rank, std::move(save)));
}

SurvivorSave::SurvivorSave(int rank, std::function<std::string()> save) : rank_(rank), save_(std::move(save)) {
  if (::pipe(pipe_) != 0) throw IoError("[elastic] cannot create the survivor-save pipe");
  wake_fd = pipe_[1];
  thread_ = std::thread([this] { run(); });
  std::signal(SIGUSR1, on_save_signal);
}

SurvivorSave::~SurvivorSave() {
  std::signal(SIGUSR1, SIG_DFL);
  wake_fd = -1;
  const char b = kStopByte;
  [[maybe_unused]] ssize_t n = ::write(pipe_[1], &b, 1);
  thread_.join();
  ::close(pipe_[0]);
  ::close(pipe_[1]);
}

void SurvivorSave::run() {
  char b = 0;
  while (::read(pipe_[0], &b, 1) < 0) {
  }
  if (b != kSaveByte) return;
  save_now();
  std::fflush(stdout);
  std::_Exit(kExitCode);  // the main thread is stuck in a collective with the dead peer
}

void SurvivorSave::save_now() {
  std::string saved;
  try {
    saved = save_();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[elastic] rank %d: a peer is gone and saving the state in memory failed: %s\n", rank_, e.what());
  }
  if (!saved.empty())
    std::fprintf(stderr, "[elastic] rank %d: a peer is gone; saved the state in memory as %s\n", rank_, saved.c_str());
  std::fflush(stderr);
}

}  // namespace tessera::train
