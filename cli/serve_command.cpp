// tessera serve CHECKPOINT: answers prediction requests over HTTP (tessera/serve/http_server.h), with
// dynamic batching, and with --replicas R, R processes of the model behind one port.
#include <cstdio>
#include <thread>

#include "cli/commands.h"
#include "tessera/serve/http_server.h"
#include "tessera/serve/local_backend.h"
#include "tessera/serve/replica_backend.h"
#include "tessera/util/settings.h"
#include "tessera/util/thread_pool.h"

namespace tessera::cli {

Command add_serve_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("serve", "Answer predictions over HTTP: dynamic batching, replicas, /metrics");
  struct Options {
    std::string checkpoint, host = "127.0.0.1", token, batch_wait = "adaptive";
    int port = 8000, replicas = 1, http_threads = 128, max_restarts = 100, ready_fd = -1;
    int64_t max_batch = 32, max_samples = 4096;
    double max_wait_ms = 5, max_body_mb = 16;
    int64_t request_timeout_ms = 60000;
    bool replica = false;
  };
  auto o = std::make_shared<Options>();
  cmd->add_option("checkpoint", o->checkpoint, "A checkpoint directory, model.safetensors, or a run directory (its newest)")
      ->required();
  cmd->add_option("--host", o->host, "Address to listen on (anything but loopback needs a token)")->capture_default_str();
  cmd->add_option("--port", o->port, "Port (0: any free port, printed)")->capture_default_str()->check(CLI::Range(0, 65535));
  cmd->add_option("--replicas", o->replicas, "Processes running the model, behind this one")
      ->capture_default_str()->check(CLI::Range(1, 256));
  cmd->add_option("--max-batch", o->max_batch, "Samples per model run (1: no batching)")
      ->capture_default_str()->check(CLI::Range(int64_t{1}, int64_t{65536}));
  cmd->add_option("--max-wait-ms", o->max_wait_ms, "Longest a request waits for others to batch with")
      ->capture_default_str()->check(CLI::Range(0.0, 10000.0));
  cmd->add_option("--batch-wait", o->batch_wait,
                  "adaptive: also run a batch at once when no other request is being read (serve/batcher.h); fixed: "
                  "always wait up to --max-wait-ms for the batch to fill")
      ->capture_default_str()
      ->check(CLI::IsMember({"adaptive", "fixed"}));
  cmd->add_option("--max-body-mb", o->max_body_mb, "Largest request body accepted (413 above)")
      ->capture_default_str()->check(CLI::Range(0.001, 4096.0));
  cmd->add_option("--max-samples", o->max_samples, "Most samples in one request")
      ->capture_default_str()->check(CLI::Range(int64_t{1}, int64_t{1} << 30));
  cmd->add_option("--request-timeout-ms", o->request_timeout_ms, "A request not answered by then gets 503")
      ->capture_default_str()->check(CLI::Range(int64_t{1}, int64_t{3600000}));
  cmd->add_option("--token", o->token, "Bearer token clients must send (default: TESSERA_SERVE_TOKEN)");
  cmd->add_option("--http-threads", o->http_threads, "Connections served at once")
      ->capture_default_str()->check(CLI::Range(1, 4096));
  cmd->add_option("--max-restarts", o->max_restarts, "Replica restarts allowed in all")->capture_default_str();
  cmd->add_flag("--replica", o->replica)->group("");   // internal: one replica of a router
  cmd->add_option("--ready-fd", o->ready_fd)->group("");
  return {cmd, [=]() -> int {
    serve::block_serve_signals();  // before any thread starts
    std::string token = o->token;
    if (token.empty())
      if (const char* t = env_setting("TESSERA_SERVE_TOKEN")) token = t;
    serve::ServeMetrics metrics(o->max_batch);
    serve::ServerOptions server;
    server.host = o->replica ? "127.0.0.1" : o->host;
    server.port = o->replica ? 0 : o->port;
    server.token = token;
    server.max_body_bytes = static_cast<size_t>(o->max_body_mb * 1024 * 1024);
    server.http_threads = o->http_threads;
    server.ready_fd = o->ready_fd;
    const auto timeout = std::chrono::milliseconds(o->request_timeout_ms);
    char description[256];
    if (o->replicas > 1 && !o->replica) {
      // Each replica gets an equal share of the cores (at least one thread).
      const int threads = std::max(1, num_threads() / o->replicas);
      serve::ReplicaOptions r;
      r.count = o->replicas;
      r.max_restarts = o->max_restarts;
      r.forward_timeout = timeout;
      r.argv = {"tessera", "--threads", std::to_string(threads), "serve", o->checkpoint, "--replica",
                "--max-batch", std::to_string(o->max_batch), "--max-wait-ms", std::to_string(o->max_wait_ms),
                "--batch-wait", o->batch_wait,
                "--max-body-mb", std::to_string(o->max_body_mb), "--max-samples", std::to_string(o->max_samples),
                "--request-timeout-ms", std::to_string(o->request_timeout_ms),
                "--http-threads", std::to_string(o->http_threads)};
      serve::ReplicaBackend backend(r, metrics);
      std::snprintf(description, sizeof description, "%d replicas of %s, %d threads each, max batch %lld, max wait %g ms",
                    o->replicas, o->checkpoint.c_str(), threads, static_cast<long long>(o->max_batch), o->max_wait_ms);
      server.description = description;
      return serve::serve_http(backend, metrics, server);
    }
    serve::BatcherOptions batching;
    batching.max_batch = o->max_batch;
    batching.max_wait = std::chrono::microseconds(static_cast<int64_t>(o->max_wait_ms * 1000));
    batching.adaptive = o->batch_wait == "adaptive";
    serve::RequestLimits limits;
    limits.max_samples = o->max_samples;
    serve::LocalBackend backend(o->checkpoint, batching, limits, metrics, timeout);
    auto p = backend.predictor();
    std::snprintf(description, sizeof description, "%s from %s, %d threads, max batch %lld, max wait %g ms (%s)",
                  p->model_name().c_str(), p->checkpoint().c_str(), num_threads(), static_cast<long long>(o->max_batch),
                  o->max_wait_ms, o->batch_wait.c_str());
    server.description = description;
    return serve::serve_http(backend, metrics, server);
  }};
}

}  // namespace tessera::cli
