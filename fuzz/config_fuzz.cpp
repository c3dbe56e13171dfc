// Fuzz target: the TOML config loader and its validation (train/config.h), what `tessera train`
// reads first from a user's file. Whatever the bytes, parsing and validation end in a config or in
// tessera's ValueError, never another exception, a crash or a hang; a config that parses and
// validates writes itself out (to_toml, as checkpoints store it) and reads back to the same text.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "tessera/core/error.h"
#include "tessera/train/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera;
  const std::string text(reinterpret_cast<const char*>(data), size);
  train::TrainConfig config;
  try {
    config = train::parse_config(text, "fuzz.toml");
    train::check_settings(config);  // validate() adds the model registry, i.e. the whole library
  } catch (const Error&) {
    return 0;  // refused clearly: what a user sees as "tessera train: ..." with exit status 3
  }
  const std::string written = train::to_toml(config);
  try {
    if (train::to_toml(train::parse_config(written, "written.toml")) != written) std::abort();
  } catch (const Error&) {
    std::abort();  // a config tessera accepted and wrote must read back
  }
  return 0;
}
