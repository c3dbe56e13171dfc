// Where the HTTP front end sends the requests that need the model: this process's own model and
// batcher (LocalBackend), or replica processes (ReplicaBackend). The front end (http_server.h) owns
// routing, tokens, limits and metrics; a backend only answers.
#pragma once
#include <string>

namespace tessera::serve {

struct Reply {
  int status = 200;
  std::string body;  // JSON
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual Reply predict(const std::string& body) = 0;
  // Loads the checkpoint path given at start again (a run directory: its newest checkpoint) without
  // dropping a request.
  virtual Reply reload() = 0;
  // The body of GET /healthz; ok false answers 503.
  virtual Reply health() = 0;
  // Lines appended to GET /metrics (already in the exposition format).
  virtual std::string metrics_extra() { return ""; }
  // After the front end stopped taking requests and answered those in flight.
  virtual void stop() = 0;
};

}  // namespace tessera::serve
