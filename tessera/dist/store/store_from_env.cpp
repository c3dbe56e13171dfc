#include "tessera/dist/store/store_from_env.h"

#include <charconv>
#include <cstdlib>

#include "tessera/core/error.h"
#include "tessera/dist/store/tcp_store.h"
#include "tessera/util/settings.h"

namespace tessera::dist {

namespace {

// `value` is the variable's value as read (getenv for the launcher's contract, env_setting for the
// TESSERA_* settings of the registry).
std::string require_env(const char* name, const char* meaning, const char* value) {
  TESSERA_CHECK(value && *value, "[store_from_env] environment variable ", name, " (", meaning,
                ") is not set; start the program with `tessera run` or set it by hand");
  return value;
}

int64_t parse_int(const char* name, const std::string& text, int64_t lo, int64_t hi) {
  int64_t value = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  TESSERA_CHECK(ec == std::errc() && ptr == text.data() + text.size() && value >= lo && value <= hi,
                "[store_from_env] environment variable ", name, "='", text, "' is not an integer in [", lo, ", ",
                hi, "]");
  return value;
}

}  // namespace

std::shared_ptr<Store> store_from_env(Milliseconds timeout) {
  return store_from_env(timeout,
                        static_cast<int>(parse_int("RANK", require_env("RANK", "this process's rank", std::getenv("RANK")), 0, 1 << 30)));
}

std::shared_ptr<Store> store_from_env(Milliseconds timeout, int rank) {
  TcpStoreOptions options;
  options.host = require_env("MASTER_ADDR", "the store's host", std::getenv("MASTER_ADDR"));
  options.port = static_cast<uint16_t>(
      parse_int("MASTER_PORT", require_env("MASTER_PORT", "the store's port", std::getenv("MASTER_PORT")), 1, 65535));
  options.token = require_env("TESSERA_JOB_TOKEN", "the job token the launcher generated",
                              env_setting("TESSERA_JOB_TOKEN"));
  options.rank = rank;
  options.timeout = timeout;
  options.connect_timeout = timeout;
  return std::make_shared<TcpStore>(std::move(options));
}

}  // namespace tessera::dist
