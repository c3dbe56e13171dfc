#include "tessera/serve/http_server.h"

#include <csignal>
#include <cstdio>
#include <httplib.h>
#include <pthread.h>
#include <sys/socket.h>
#include <thread>
#include <unistd.h>

#include "tessera/core/error.h"
#include "tessera/dist/net/token_check.h"
#include "tessera/serve/request_codec.h"

namespace tessera::serve {

namespace {

using Clock = std::chrono::steady_clock;
using tessera::detail::concat;

constexpr const char* kRoutes = "POST /v1/predict, POST /v1/reload, GET /healthz, GET /metrics";

// httplib listens with a backlog of 5 (compiled into Debian's library): 64 clients connecting at once
// would overflow it and wait a second for the kernel's SYN retry. listen() on a listening socket
// only changes its backlog, which the protected socket lets us do.
class Server : public httplib::Server {
 public:
  void deepen_backlog() { ::listen(svr_sock_, 1024); }
};

sigset_t serve_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGHUP);
  return set;
}

void reply(httplib::Response& res, const Reply& r) {
  res.status = r.status;
  res.set_content(r.body, "application/json");
}

// Runs a handler; a library error becomes its status and a JSON error.
template <typename F>
Reply guarded(F&& f) {
  try {
    return f();
  } catch (const ValueError& e) {
    return {400, encode_error(e.what())};
  } catch (const TimeoutError& e) {
    return {503, encode_error(e.what())};
  } catch (const std::exception& e) {
    return {500, encode_error(e.what())};
  }
}

}  // namespace

void block_serve_signals() {
  sigset_t set = serve_signals();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

bool is_loopback(const std::string& host) {
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

int serve_http(Backend& backend, ServeMetrics& metrics, const ServerOptions& options) {
  if (!is_loopback(options.host) && options.token.empty())
    throw ValueError(concat("[serve] --host ", options.host, " would take requests from other machines without a "
                            "token: give one with --token or TESSERA_SERVE_TOKEN (clients send "
                            "\"Authorization: Bearer <token>\"), or listen on 127.0.0.1"));
  Server svr;
  const int threads = options.http_threads;
  svr.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
  svr.set_payload_max_length(options.max_body_bytes);
  svr.set_keep_alive_max_count(100000);  // httplib's default of 5 would make load-test clients reconnect
  svr.set_read_timeout(10, 0);           // a client that stops sending mid-request holds a thread no longer
  svr.set_write_timeout(10, 0);
  svr.set_tcp_nodelay(true);
  std::atomic<bool> draining{false};

  const std::string token = options.token;
  svr.set_pre_routing_handler([token](const httplib::Request& req, httplib::Response& res) {
    if (token.empty() || req.path == "/healthz") return httplib::Server::HandlerResponse::Unhandled;
    const std::string auth = req.get_header_value("Authorization");
    const std::string prefix = "Bearer ";
    if (auth.rfind(prefix, 0) == 0 && dist::detail::tokens_equal(auth.substr(prefix.size()), token))
      return httplib::Server::HandlerResponse::Unhandled;
    reply(res, {401, encode_error("[serve] this server needs \"Authorization: Bearer <token>\" (the token of --token "
                                  "or TESSERA_SERVE_TOKEN)")});
    return httplib::Server::HandlerResponse::Handled;
  });
  svr.set_error_handler([&options](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    std::string message;
    if (res.status == 404) message = concat("[serve] no route ", req.method, " ", req.path, "; the routes are ", kRoutes);
    else if (res.status == 413)
      message = concat("[serve] the body is over the limit of ", options.max_body_bytes, " bytes (--max-body-mb)");
    else if (res.status == 400) message = "[serve] malformed HTTP request";
    else message = concat("[serve] HTTP status ", res.status);
    res.set_content(encode_error(message), "application/json");
  });
  // What escaped a handler (guarded() catches the library's errors): named with its route.
  svr.set_exception_handler([](const httplib::Request& req, httplib::Response& res, std::exception_ptr error) {
    std::string what = "an unknown exception";
    try {
      std::rethrow_exception(error);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    reply(res, {500, encode_error(concat("[serve] ", req.method, " ", req.path, " failed: ", what))});
  });

  svr.Post("/v1/predict", [&](const httplib::Request& req, httplib::Response& res) {
    const auto start = Clock::now();
    metrics.in_flight().fetch_add(1);
    Reply r = guarded([&] { return backend.predict(req.body); });
    metrics.in_flight().fetch_sub(1);
    metrics.request_done("/v1/predict", r.status, std::chrono::duration<double>(Clock::now() - start).count());
    reply(res, r);
  });
  svr.Post("/v1/reload", [&](const httplib::Request&, httplib::Response& res) {
    Reply r = guarded([&] { return backend.reload(); });
    metrics.request_done("/v1/reload", r.status, 0);
    reply(res, r);
  });
  svr.Get("/healthz", [&](const httplib::Request&, httplib::Response& res) {
    Reply r = draining ? Reply{503, encode_error("[serve] draining: shutting down")} : guarded([&] { return backend.health(); });
    metrics.request_done("/healthz", r.status, 0);
    reply(res, r);
  });
  svr.Get("/metrics", [&](const httplib::Request&, httplib::Response& res) {
    metrics.request_done("/metrics", 200, 0);
    res.set_content(metrics.prometheus_text(backend.metrics_extra()), "text/plain; version=0.0.4");
  });

  int port = options.port;
  if (port == 0) port = svr.bind_to_any_port(options.host);
  else if (!svr.bind_to_port(options.host, port)) port = -1;
  if (port <= 0)
    throw IoError(concat("[serve] cannot listen on ", options.host, ":", options.port,
                         " (in use, or not an address of this machine): choose another --port or --host"));
  svr.deepen_backlog();
  if (options.ready_fd < 0) {  // a replica's router prints its address instead
    std::printf("tessera serve: listening on http://%s:%d (%s)\n", options.host.c_str(), port, options.description.c_str());
    std::fflush(stdout);
  } else {
    const std::string line = std::to_string(port) + "\n";
    [[maybe_unused]] ssize_t w = ::write(options.ready_fd, line.data(), line.size());
    ::close(options.ready_fd);
  }

  // The signal thread: SIGHUP reloads, SIGTERM/SIGINT drain. serve_http's own end (listen failing)
  // wakes it with a SIGTERM sent to it alone.
  std::atomic<bool> server_done{false};
  std::thread signals([&] {
    sigset_t set = serve_signals();
    while (true) {
      int sig = 0;
      if (sigwait(&set, &sig) != 0) continue;
      if (server_done) return;
      if (sig == SIGHUP) {
        Reply r = guarded([&] { return backend.reload(); });
        std::fprintf(stderr, "tessera serve: SIGHUP: reload %s: %s\n", r.status == 200 ? "done" : "failed", r.body.c_str());
        continue;
      }
      std::fprintf(stderr, "tessera serve: %s: answering the requests in flight, then stopping\n",
                   sig == SIGINT ? "SIGINT" : "SIGTERM");
      draining = true;
      svr.stop();
      return;
    }
  });
  const bool ok = svr.listen_after_bind();
  server_done = true;
  pthread_kill(signals.native_handle(), SIGTERM);
  signals.join();
  backend.stop();
  std::fprintf(stderr, "tessera serve: stopped\n");
  return ok || draining ? 0 : 1;
}

}  // namespace tessera::serve
