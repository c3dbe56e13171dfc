// tessera bench infer | serve: what a served model costs against the same model run offline.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <regex>
#include <sstream>

#include "bench/bench.h"
#include "tessera/core/error.h"
#include "tessera/core/rng.h"
#include "tessera/ops/ops.h"
#include "tessera/serve/predictor.h"
#include "tessera/util/base64.h"
#include "tessera/util/thread_pool.h"

namespace tessera::bench {

namespace {

using Clock = std::chrono::steady_clock;

std::vector<int64_t> parse_list(const std::string& s) {
  std::vector<int64_t> out;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ',')) out.push_back(std::stoll(item));
  TESSERA_CHECK(!out.empty(), "[bench] empty list '", s, "'");
  return out;
}

Tensor random_batch(const serve::Predictor& p, int64_t n, uint64_t seed) {
  Shape shape{n};
  shape.insert(shape.end(), p.sample_shape().begin(), p.sample_shape().end());
  Generator g(seed);
  if (p.input_dtype() == DType::Int64) return randint(0, p.id_bound(), shape, g);
  return rand(shape, g);
}

// Samples/s of p.predict at batch n over about `seconds`, after one warm-up batch.
double offline_samples_per_second(serve::Predictor& p, int64_t n, int seconds) {
  Tensor x = random_batch(p, n, 1);
  p.predict(x);
  int64_t samples = 0;
  const auto start = Clock::now();
  const auto end = start + std::chrono::seconds(seconds);
  while (Clock::now() < end) {
    p.predict(x);
    samples += n;
  }
  return static_cast<double>(samples) / std::chrono::duration<double>(Clock::now() - start).count();
}

struct WrkResult {
  double requests_per_s = 0, p50_ms = 0, p99_ms = 0;
  long errors = 0;
  std::string raw;
};

double to_ms(const std::string& value, const std::string& unit) {
  const double v = std::stod(value);
  return unit == "us" ? v / 1000 : unit == "s" ? v * 1000 : unit == "m" ? v * 60000 : v;
}

WrkResult run_wrk(const std::string& script, int port, int64_t clients, int seconds) {
  const int64_t threads = std::min<int64_t>(2, clients);
  const std::string cmd = "wrk -t" + std::to_string(threads) + " -c" + std::to_string(clients) + " -d" +
                          std::to_string(seconds) + "s --latency -s " + script + " http://127.0.0.1:" +
                          std::to_string(port) + "/v1/predict 2>&1";
  FILE* pipe = popen(cmd.c_str(), "r");
  TESSERA_CHECK(pipe != nullptr, "[bench serve] cannot run wrk (apt-get install wrk)");
  WrkResult r;
  char buf[4096];
  while (std::fgets(buf, sizeof buf, pipe)) r.raw += buf;
  const int status = pclose(pipe);
  TESSERA_CHECK(status == 0, "[bench serve] wrk failed (status ", status, "):\n", r.raw);
  std::smatch m;
  if (std::regex_search(r.raw, m, std::regex("Requests/sec:\\s+([0-9.]+)"))) r.requests_per_s = std::stod(m[1]);
  if (std::regex_search(r.raw, m, std::regex("\\n\\s+50%\\s+([0-9.]+)(us|ms|s|m)"))) r.p50_ms = to_ms(m[1], m[2]);
  if (std::regex_search(r.raw, m, std::regex("\\n\\s+99%\\s+([0-9.]+)(us|ms|s|m)"))) r.p99_ms = to_ms(m[1], m[2]);
  if (std::regex_search(r.raw, m, std::regex("Non-2xx or 3xx responses:\\s+([0-9]+)"))) r.errors += std::stol(m[1]);
  if (std::regex_search(r.raw, m, std::regex("Socket errors: connect ([0-9]+), read ([0-9]+), write ([0-9]+), timeout ([0-9]+)")))
    r.errors += std::stol(m[1]) + std::stol(m[2]) + std::stol(m[3]) + std::stol(m[4]);
  return r;
}

// `tessera serve` started for the run; its port read from the line it prints (within 60 s).
struct ServerProcess {
  pid_t pid = -1;
  int port = 0;
  ~ServerProcess() {
    if (pid <= 0) return;
    ::kill(pid, SIGTERM);
    int status = 0;
    ::waitpid(pid, &status, 0);
  }
};

void start_server(ServerProcess& s, const ServeBenchOptions& o) {
  int out[2];
  TESSERA_CHECK(::pipe2(out, O_CLOEXEC) == 0, "[bench serve] pipe failed");
  char self[4096];
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
  TESSERA_CHECK(n > 0, "[bench serve] cannot find this executable");
  self[n] = '\0';
  std::vector<std::string> args{self, "--threads", std::to_string(num_threads()), "serve", o.checkpoint, "--port", "0",
                                "--max-batch", std::to_string(o.max_batch), "--max-wait-ms", std::to_string(o.max_wait_ms),
                                "--batch-wait", o.batch_wait,
                                "--replicas", std::to_string(o.replicas)};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  s.pid = ::fork();
  if (s.pid == 0) {
    ::dup2(out[1], 1);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  ::close(out[1]);
  std::string text;
  std::smatch m;
  const std::regex listening("listening on http://127\\.0\\.0\\.1:([0-9]+)");
  const auto deadline = Clock::now() + std::chrono::seconds(60);
  while (!std::regex_search(text, m, listening) && Clock::now() < deadline) {
    pollfd p{out[0], POLLIN, 0};
    if (::poll(&p, 1, 1000) <= 0) continue;
    char buf[512];
    const ssize_t r = ::read(out[0], buf, sizeof buf);
    if (r <= 0) break;
    text.append(buf, static_cast<size_t>(r));
  }
  ::close(out[0]);
  TESSERA_CHECK(std::regex_search(text, m, listening), "[bench serve] tessera serve did not start: ", text);
  s.port = std::stoi(m[1]);
}

}  // namespace

int infer(const ServeBenchOptions& o) {
  auto p = serve::Predictor::load(o.checkpoint);
  TESSERA_CHECK(!p->generates_text(), "[bench infer] ", p->model_name(), " generates text; give a classifier checkpoint");
  std::printf("offline inference of %s (%s), %d threads, %d s per cell\n", p->model_name().c_str(), p->checkpoint().c_str(),
              num_threads(), o.seconds);
  std::printf("%8s %14s\n", "batch", "samples/s");
  for (int64_t b : parse_list(o.batches))
    std::printf("%8lld %14.0f\n", static_cast<long long>(b), offline_samples_per_second(*p, b, o.seconds));
  return 0;
}

int serve(const ServeBenchOptions& o) {
  auto p = serve::Predictor::load(o.checkpoint);
  TESSERA_CHECK(!p->generates_text(), "[bench serve] ", p->model_name(), " generates text; give a classifier checkpoint");
  const double offline = offline_samples_per_second(*p, o.max_batch, o.seconds);
  // One sample per request, as base64 float32 (the compact form clients send).
  Tensor sample = random_batch(*p, 1, 7).contiguous();
  TESSERA_CHECK(p->input_dtype() == DType::Float32, "[bench serve] the load test sends float32 images or rows");
  const std::string bytes(static_cast<const char*>(sample.raw_data()), static_cast<size_t>(sample.numel()) * 4);
  std::string shape = "[1";
  for (int64_t d : p->sample_shape()) shape += "," + std::to_string(d);
  shape += "]";
  char script[] = "/tmp/tessera-bench-serve-XXXXXX.lua";
  const int fd = ::mkstemps(script, 4);
  TESSERA_CHECK(fd >= 0, "[bench serve] cannot write the wrk script");
  ::close(fd);
  std::ofstream(script) << "wrk.method = \"POST\"\nwrk.headers[\"Content-Type\"] = \"application/json\"\n"
                        << "wrk.body = '{\"inputs\": {\"b64\": \"" << base64_encode(bytes) << "\", \"shape\": " << shape
                        << "}, \"top_k\": 1}'\n";
  int rc = 0;
  {
    ServerProcess server;
    start_server(server, o);
    std::printf("tessera serve %s: %s, %d replica(s), max batch %lld, max wait %g ms (%s), %d threads; wrk %d s per cell\n",
                p->model_name().c_str(), p->checkpoint().c_str(), o.replicas, static_cast<long long>(o.max_batch),
                o.max_wait_ms, o.batch_wait.c_str(), num_threads(), o.seconds);
    std::printf("offline batched inference (batch %lld, same threads, no HTTP): %.0f samples/s\n",
                static_cast<long long>(o.max_batch), offline);
    std::printf("%8s %12s %10s %10s %10s %8s\n", "clients", "requests/s", "vs offline", "p50 ms", "p99 ms", "errors");
    run_wrk(script, server.port, std::min<int64_t>(8, parse_list(o.clients).back()), 1);  // warm-up
    for (int64_t c : parse_list(o.clients)) {
      WrkResult r = run_wrk(script, server.port, c, o.seconds);
      std::printf("%8lld %12.0f %9.0f%% %10.2f %10.2f %8ld\n", static_cast<long long>(c), r.requests_per_s,
                  100.0 * r.requests_per_s / offline, r.p50_ms, r.p99_ms, r.errors);
      if (r.errors > 0) rc = 1;
    }
  }
  ::unlink(script);
  return rc;
}

}  // namespace tessera::bench
