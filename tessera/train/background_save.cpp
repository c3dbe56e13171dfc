#include "tessera/train/background_save.h"

#include <chrono>
#include <cstdio>
#include <exception>

namespace tessera::train {

BackgroundSaver::~BackgroundSaver() {
  if (!in_flight_.valid()) return;
  try {
    in_flight_.get();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[checkpoint] the last background save failed: %s\n", e.what());
  }
}

void BackgroundSaver::submit(std::function<std::string()> save) {
  wait();
  in_flight_ = std::async(std::launch::async, std::move(save));
}

void BackgroundSaver::check() {
  if (in_flight_.valid() && in_flight_.wait_for(std::chrono::seconds(0)) == std::future_status::ready) in_flight_.get();
}

std::string BackgroundSaver::wait() { return in_flight_.valid() ? in_flight_.get() : std::string(); }

}  // namespace tessera::train
