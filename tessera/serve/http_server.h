// The HTTP front end of `tessera serve` (cpp-httplib, Debian's libcpp-httplib-dev: a small, well-kept
// server of one header and library, with keep-alive, body limits and timeouts built in; Boost.Beast
// would give more control for far more code, and throughput here is bound by the model, not the
// parser). Routes:
//   POST /v1/predict   the backend's prediction (request_codec.h)
//   POST /v1/reload    the checkpoint loaded again (also SIGHUP)
//   GET  /healthz      {"status": "ok", ...}; 503 while draining or with no replica ready
//   GET  /metrics      Prometheus text (metrics.h)
// Every error is a JSON {"error": "..."}: 400 bad input, 401 a missing or wrong token, 404 an unknown
// route, 413 a body over the limit, 500 a server fault, 503 unavailable or timed out. SIGTERM and
// SIGINT stop taking connections and answer what is in flight before returning.
#pragma once
#include <cstddef>
#include <string>

#include "tessera/serve/backend.h"
#include "tessera/serve/metrics.h"

namespace tessera::serve {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;             // 0: any free port (printed)
  // When not empty, every route but /healthz requires "Authorization: Bearer <token>".
  std::string token;
  size_t max_body_bytes = 16u << 20;
  // One thread per open connection (httplib's model): enough for the clients expected at once.
  int http_threads = 128;
  int ready_fd = -1;           // a replica writes "<port>\n" here once listening
  std::string description;     // printed with the address once listening
};

// Blocks SIGTERM, SIGINT and SIGHUP in the calling thread and those it starts later, so that
// serve_http's signal thread alone receives them: call it before creating the backend's threads.
void block_serve_signals();

// True for 127.0.0.0/8, ::1 and "localhost".
bool is_loopback(const std::string& host);

// Serves until SIGTERM or SIGINT, then drains and calls backend.stop(). Returns the exit code.
// ValueError for a non-loopback host without a token; IoError when the address cannot be bound.
int serve_http(Backend& backend, ServeMetrics& metrics, const ServerOptions& options);

}  // namespace tessera::serve
