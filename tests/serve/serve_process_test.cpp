// `tessera serve` as users run it: a real process on a real checkpoint, spoken to over HTTP.
#include <gtest/gtest.h>
#include <httplib.h>
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fcntl.h>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <thread>

#include "tessera/core/rng.h"
#include "tessera/ops/ops.h"
#include "tessera/serve/predictor.h"
#include "testing/temp_dir.h"

namespace tessera::serve {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;
using tessera::testing::fresh_dir;
using tessera::testing::read_text;

// `tessera train` of a small model into <dir>/<name>; returns the run directory.
std::string train_run(const std::string& dir, const std::string& name, const std::string& model_toml, int steps,
                      const std::string& extra = "") {
  const std::string config = dir + "/" + name + ".toml";
  std::ofstream(config) << model_toml << "[optimizer]\nname = \"adam\"\nlr = 0.01\n"
                        << "[train]\nepochs = 1\nbatch_size = 16\nthreads = 1\nlog_every = 100\nmax_steps = " << steps
                        << "\noutput_dir = \"" << dir << "/" << name << "\"\n";
  const std::string cmd = std::string(TESSERA_BINARY) + " train " + config + " " + extra + " > " + dir + "/" + name +
                          ".log 2>&1";
  EXPECT_EQ(std::system(cmd.c_str()), 0) << read_text(dir + "/" + name + ".log");
  return dir + "/" + name;
}

const char* kCnn = "[model]\nname = \"cnn\"\n[data]\ndataset = \"synthetic\"\nsamples = 256\ntest_samples = 32\n";

// One `tessera serve` process: its address from the line it prints, its stderr in a file.
class Server {
 public:
  Server(const std::string& dir, const std::vector<std::string>& args, const std::vector<std::string>& env = {}) {
    log_ = dir + "/serve" + std::to_string(counter_++) + ".log";
    int out[2];
    EXPECT_EQ(::pipe2(out, O_CLOEXEC), 0);
    std::vector<std::string> argv{TESSERA_BINARY, "--threads", "1", "serve"};
    argv.insert(argv.end(), args.begin(), args.end());
    argv.insert(argv.end(), {"--port", "0"});
    std::vector<char*> a;
    for (auto& s : argv) a.push_back(s.data());
    a.push_back(nullptr);
    std::vector<std::string> env_copy = env;
    pid_ = ::fork();
    if (pid_ == 0) {
      ::dup2(out[1], 1);
      const int err = ::open(log_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      ::dup2(err, 2);
      for (auto& e : env_copy) ::putenv(e.data());
      ::execv(a[0], a.data());
      ::_exit(127);
    }
    ::close(out[1]);
    out_ = out[0];
    // The address line, within 60 s (loading a checkpoint takes well under a second).
    std::string text;
    const auto deadline = Clock::now() + std::chrono::seconds(60);
    std::smatch m;
    const std::regex listening("listening on http://127\\.0\\.0\\.1:([0-9]+)");
    while (!std::regex_search(text, m, listening) && Clock::now() < deadline) {
      pollfd p{out_, POLLIN, 0};
      if (::poll(&p, 1, 1000) <= 0) continue;
      char buf[512];
      const ssize_t n = ::read(out_, buf, sizeof buf);
      if (n <= 0) break;
      text.append(buf, static_cast<size_t>(n));
    }
    if (std::regex_search(text, m, listening)) port_ = std::stoi(m[1]);
    EXPECT_GT(port_, 0) << "no address printed; stdout: " << text << "\nstderr: " << read_text(log_);
  }
  ~Server() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    ::close(out_);
  }
  int port() const { return port_; }
  pid_t pid() const { return pid_; }
  std::string log() const { return read_text(log_); }
  httplib::Client client() const {
    httplib::Client c("127.0.0.1", port_);
    c.set_read_timeout(60, 0);
    return c;
  }
  // Sends `signal` and waits (bounded) for the exit; the wait status, or -1 on timeout.
  int stop(int signal = SIGTERM, std::chrono::seconds limit = std::chrono::seconds(60)) {
    ::kill(pid_, signal);
    const int fd = static_cast<int>(::syscall(SYS_pidfd_open, pid_, 0));
    pollfd p{fd, POLLIN, 0};
    const int ready = ::poll(&p, 1, static_cast<int>(limit.count() * 1000));
    ::close(fd);
    if (ready <= 0) return -1;
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
    return status;
  }

 private:
  static inline int counter_ = 0;
  pid_t pid_ = -1;
  int out_ = -1, port_ = 0;
  std::string log_;
};

std::string images_body(const std::vector<float>& values, int64_t n) {
  json rows = json::array();
  for (int64_t i = 0; i < n; ++i) rows.push_back(std::vector<float>(values.begin() + i * 784, values.begin() + (i + 1) * 784));
  return json{{"inputs", rows}, {"top_k", 2}}.dump();
}

std::vector<float> random_images(int64_t n, uint64_t seed) {
  Generator g(seed);
  return rand({n, 784}, g).to_vector<float>();
}

// The body of a reply, or a note saying there was none (never a null dereference).
std::string body_of(const httplib::Result& res) { return res ? res->body : "(no reply: " + httplib::to_string(res.error()) + ")"; }
int status_of(const httplib::Result& res) { return res ? res->status : -1; }

// The probabilities a reply holds, row after row.
std::vector<float> probabilities_of(const std::string& body) {
  std::vector<float> out;
  const json reply = json::parse(body, nullptr, false);
  if (!reply.is_object() || !reply.contains("outputs")) return out;
  for (const auto& o : reply["outputs"])
    for (float p : o["probabilities"]) out.push_back(p);
  return out;
}

// int of the metric line `name` (exact, labels included) in a /metrics text; -1 when absent.
double metric(const std::string& text, const std::string& name) {
  const size_t at = text.find("\n" + name + " ");
  return at == std::string::npos ? -1 : std::stod(text.substr(at + name.size() + 2));
}

class ServeProcess : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(fresh_dir("ServeProcess", "suite"));
    cnn_ = new std::string(train_run(*dir_, "cnn", kCnn, 3));
  }
  static void TearDownTestSuite() {
    delete dir_;
    delete cnn_;
  }
  static std::string* dir_;
  static std::string* cnn_;
};
std::string* ServeProcess::dir_ = nullptr;
std::string* ServeProcess::cnn_ = nullptr;

TEST_F(ServeProcess, RepliesEqualTheCheckpointsModelWithAndWithoutBatching) {
  auto reference = Predictor::load(*cnn_);  // what `tessera eval` runs: the checkpoint's model in eval mode
  const std::vector<float> images = random_images(4, 11);
  const std::vector<float> expected = reference->predict(from_vector(images, {4, 1, 28, 28})).to_vector<float>();

  // Batching on: four single-image requests at once make one batch of four (fixed waiting, long; the
  // fourth request fills the batch and cuts it short).
  Server batched(*dir_, {*cnn_, "--max-batch", "4", "--max-wait-ms", "10000", "--batch-wait", "fixed"});
  ASSERT_GT(batched.port(), 0);
  std::vector<std::string> replies(4);
  std::vector<std::thread> clients;
  for (int i = 0; i < 4; ++i)
    clients.emplace_back([&, i] {
      std::vector<float> one(images.begin() + i * 784, images.begin() + (i + 1) * 784);
      auto res = batched.client().Post("/v1/predict", images_body(one, 1), "application/json");
      if (res && res->status == 200) replies[i] = res->body;
    });
  for (auto& t : clients) t.join();
  const std::string metrics = body_of(batched.client().Get("/metrics"));
  EXPECT_EQ(metric(metrics, "tessera_serve_batch_size_count"), 1) << metrics;
  EXPECT_EQ(metric(metrics, "tessera_serve_batch_size_sum"), 4) << metrics;

  // Batching off: one request of four images, then each image alone.
  Server unbatched(*dir_, {*cnn_, "--max-batch", "1"});
  ASSERT_GT(unbatched.port(), 0);
  auto all = unbatched.client().Post("/v1/predict", images_body(images, 4), "application/json");
  ASSERT_TRUE(all && all->status == 200) << (all ? all->body : "no reply");
  const std::vector<float> together = probabilities_of(all->body);
  ASSERT_EQ(together.size(), expected.size());
  for (int i = 0; i < 4; ++i) {
    ASSERT_FALSE(replies[i].empty()) << "request " << i << " failed; " << batched.log();
    const std::vector<float> got = probabilities_of(replies[i]);
    auto alone = unbatched.client().Post("/v1/predict", images_body(std::vector<float>(images.begin() + i * 784,
                                                                                         images.begin() + (i + 1) * 784), 1),
                                         "application/json");
    ASSERT_EQ(status_of(alone), 200) << body_of(alone);
    const std::vector<float> single = probabilities_of(alone->body);
    for (int c = 0; c < 10; ++c) {
      // Batched GEMMs and convolutions may sum in another order: equal to float32 rounding.
      EXPECT_NEAR(got[c], expected[i * 10 + c], 1e-5) << "image " << i << " class " << c;
      EXPECT_NEAR(single[c], expected[i * 10 + c], 1e-5);
      EXPECT_NEAR(together[i * 10 + c], expected[i * 10 + c], 1e-5);
    }
    const json r = json::parse(replies[i])["outputs"][0];
    EXPECT_EQ(r["top_k"].size(), 2u);
    EXPECT_EQ(r["label"], r["top_k"][0]["label"]);
  }
  EXPECT_EQ(batched.stop(), 0) << batched.log();
}

TEST_F(ServeProcess, BadRequestsGetAJsonErrorNamingTheProblemAndTheServerGoesOn) {
  Server s(*dir_, {*cnn_, "--max-body-mb", "0.05"});
  ASSERT_GT(s.port(), 0);
  auto c = s.client();
  auto expect_error = [&](const httplib::Result& res, int status, const std::string& words) {
    ASSERT_TRUE(res) << "no reply for the " << words << " case; " << s.log();
    EXPECT_EQ(res->status, status) << res->body;
    const json j = json::parse(res->body, nullptr, false);
    ASSERT_TRUE(j.is_object() && j.contains("error")) << res->body;
    EXPECT_NE(j["error"].get<std::string>().find(words), std::string::npos) << res->body;
  };
  expect_error(c.Post("/v1/predict", "{\"inputs\": [1, 2", "application/json"), 400, "not valid JSON");
  expect_error(c.Post("/v1/predict", "{\"inputs\": [[1, 2, 3]]}", "application/json"), 400,
               "shape [1, 3]; the model takes [N, 1, 28, 28] or [N, 784] float32");
  expect_error(c.Post("/v1/predict", "{\"inputs\": {\"b64\": \"AAAA\", \"shape\": [1, 1, 28, 28], \"dtype\": \"int64\"}}",
                      "application/json"),
               400, "takes float32");
  expect_error(c.Get("/v1/nothing"), 404, "no route GET /v1/nothing");
  expect_error(c.Post("/v1/predict", std::string(100 * 1024, ' '), "application/json"), 413, "over the limit of 52428 bytes");
  auto ok = c.Get("/healthz");
  ASSERT_TRUE(ok);
  ASSERT_EQ(status_of(ok), 200);
  EXPECT_EQ(json::parse(ok->body)["model"], "cnn");
  const std::string metrics = body_of(c.Get("/metrics"));
  EXPECT_EQ(metric(metrics, "tessera_serve_errors_total{kind=\"client\"}"), 3) << metrics;  // the predict errors

  // A token: every route but /healthz needs it.
  Server guarded(*dir_, {*cnn_, "--token", "s3cret"});
  ASSERT_GT(guarded.port(), 0);
  auto g = guarded.client();
  expect_error(g.Post("/v1/predict", images_body(random_images(1, 1), 1), "application/json"), 401, "Authorization");
  expect_error(g.Get("/metrics"), 401, "Authorization");
  EXPECT_EQ(status_of(g.Get("/healthz")), 200);
  g.set_bearer_token_auth("s3cret");
  EXPECT_EQ(status_of(g.Post("/v1/predict", images_body(random_images(1, 1), 1), "application/json")), 200);
  g.set_bearer_token_auth("s3creT");
  EXPECT_EQ(status_of(g.Post("/v1/predict", images_body(random_images(1, 1), 1), "application/json")), 401);
}

TEST_F(ServeProcess, AnAddressBeyondLoopbackNeedsATokenAndABadCheckpointIsNamed) {
  const std::string out = *dir_ + "/refused.log";
  int status = std::system((std::string(TESSERA_BINARY) + " serve " + *cnn_ + " --host 0.0.0.0 --port 0 > " + out +
                            " 2>&1").c_str());
  EXPECT_EQ(WEXITSTATUS(status), 3);
  EXPECT_NE(read_text(out).find("without a token"), std::string::npos) << read_text(out);
  status = std::system((std::string(TESSERA_BINARY) + " serve " + *dir_ + "/no-such-run --port 0 > " + out + " 2>&1").c_str());
  EXPECT_NE(WEXITSTATUS(status), 0);
  EXPECT_NE(read_text(out).find("no-such-run"), std::string::npos) << read_text(out);
}

TEST_F(ServeProcess, SigtermAnswersTheRequestsInFlightBeforeExiting) {
  // A long batching wait holds the requests in the server when SIGTERM comes.
  Server s(*dir_, {*cnn_, "--max-batch", "64", "--max-wait-ms", "3000", "--batch-wait", "fixed"});
  ASSERT_GT(s.port(), 0);
  std::vector<int> statuses(3, 0);
  std::vector<std::thread> clients;
  for (int i = 0; i < 3; ++i)
    clients.emplace_back([&, i] {
      auto res = s.client().Post("/v1/predict", images_body(random_images(1, i), 1), "application/json");
      statuses[i] = res ? res->status : -1;
    });
  // Until the three are in flight: a look at /metrics every 5 ms, for at most 60 s.
  double in_flight = 0;
  for (const auto deadline = Clock::now() + std::chrono::seconds(60); in_flight < 3 && Clock::now() < deadline;) {
    in_flight = metric(body_of(s.client().Get("/metrics")), "tessera_serve_in_flight");
    if (in_flight < 3) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_EQ(in_flight, 3);
  const int status = s.stop(SIGTERM);
  for (auto& t : clients) t.join();
  EXPECT_EQ(status, 0) << s.log();
  EXPECT_EQ(statuses, (std::vector<int>{200, 200, 200})) << s.log();
  EXPECT_NE(s.log().find("answering the requests in flight"), std::string::npos);
}

TEST_F(ServeProcess, ReloadTakesTheRunsNewestCheckpointWithoutARestart) {
  const std::string run = train_run(*dir_, "reloaded", kCnn, 2);
  Server s(*dir_, {run});
  ASSERT_GT(s.port(), 0);
  const std::string body = images_body(random_images(1, 5), 1);
  const std::vector<float> before = probabilities_of(body_of(s.client().Post("/v1/predict", body, "application/json")));
  // Train on: the run's newest checkpoint moves to step 6.
  train_run(*dir_, "reloaded", kCnn, 6, "--resume latest");
  auto r = s.client().Post("/v1/reload", "", "application/json");
  ASSERT_TRUE(r && r->status == 200) << (r ? r->body : "no reply") << s.log();
  EXPECT_NE(r->body.find("step-00000006"), std::string::npos) << r->body;
  const std::vector<float> after = probabilities_of(body_of(s.client().Post("/v1/predict", body, "application/json")));
  const std::vector<float> expected =
      Predictor::load(run)->predict(from_vector(random_images(1, 5), {1, 1, 28, 28})).to_vector<float>();
  for (int c = 0; c < 10; ++c) EXPECT_NEAR(after[c], expected[c], 1e-5);
  EXPECT_NE(before, after);
  // SIGHUP reloads too (the same checkpoint again here) and the server goes on.
  ::kill(s.pid(), SIGHUP);
  EXPECT_EQ(status_of(s.client().Post("/v1/predict", body, "application/json")), 200);
  EXPECT_EQ(s.stop(), 0);
  EXPECT_NE(s.log().find("SIGHUP: reload done"), std::string::npos) << s.log();
}

TEST_F(ServeProcess, AReplicaKilledUnderLoadLosesNoRequestAndIsStartedAgain) {
  Server s(*dir_, {*cnn_, "--replicas", "2", "--max-batch", "8", "--max-wait-ms", "2"});
  ASSERT_GT(s.port(), 0);
  std::smatch m;
  const std::string log = s.log();
  const std::regex replica0("replica 0 \\(pid ([0-9]+)\\) ready");
  ASSERT_TRUE(std::regex_search(log, m, replica0)) << log;
  const pid_t victim = std::stoi(m[1]);

  std::atomic<int> answered{0}, ok{0}, unavailable{0}, lost{0};
  std::atomic<bool> killed{false};
  const std::string body = images_body(random_images(1, 9), 1);
  std::vector<std::thread> clients;
  for (int t = 0; t < 4; ++t)
    clients.emplace_back([&] {
      auto c = s.client();
      for (int i = 0; i < 60; ++i) {
        auto res = c.Post("/v1/predict", body, "application/json");
        if (!res) ++lost;
        else if (res->status == 200) ++ok;
        else if (res->status == 503) ++unavailable;
        else ++lost;
        // One client kills replica 0 once a quarter of the requests were answered.
        if (++answered == 60 && !killed.exchange(true)) ::kill(victim, SIGKILL);
      }
    });
  for (auto& t : clients) t.join();
  EXPECT_TRUE(killed);
  EXPECT_EQ(lost, 0) << "requests without an answer; " << s.log();
  EXPECT_EQ(ok + unavailable, 240);
  EXPECT_GT(ok, 200);  // the other replica (and the retry) answered almost all
  // The dead replica is started again: a look at /healthz every 10 ms, for at most 120 s.
  json health;
  for (const auto deadline = Clock::now() + std::chrono::seconds(120); Clock::now() < deadline;) {
    health = json::parse(body_of(s.client().Get("/healthz")), nullptr, false);
    if (health["ready"] == 2 && health["restarts"] == 1) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(health["ready"], 2) << health.dump() << s.log();
  EXPECT_EQ(health["restarts"], 1);
  EXPECT_NE(s.log().find("was killed by signal 9"), std::string::npos) << s.log();
  const std::string metrics = body_of(s.client().Get("/metrics"));
  EXPECT_EQ(metric(metrics, "tessera_serve_replica_restarts_total"), 1);
  EXPECT_NE(metrics.find("tessera_serve_replica_batch_size_count{replica=\"1\"}"), std::string::npos) << metrics;
  EXPECT_EQ(s.stop(), 0) << s.log();
}

TEST_F(ServeProcess, TheCharLmContinuesAPromptAsTessera_generateDoes) {
  const std::string run = train_run(*dir_, "lm",
                                    "[model]\nname = \"transformer\"\nlayers = 1\nheads = 2\nembed_dim = 16\ncontext = 16\n"
                                    "[data]\ndataset = \"text\"\npath = \"/usr/share/games/fortunes\"\n",
                                    1);
  Server s(*dir_, {run});
  ASSERT_GT(s.port(), 0);
  auto res = s.client().Post("/v1/predict", R"({"prompt": "The ", "tokens": 24, "seed": 3, "temperature": 0.9})",
                             "application/json");
  ASSERT_TRUE(res && res->status == 200) << (res ? res->body : "no reply") << s.log();
  const std::string text = json::parse(res->body)["text"];
  const std::string out = *dir_ + "/generate.txt";
  ASSERT_EQ(std::system((std::string(TESSERA_BINARY) + " --threads 1 generate " + run +
                         " --prompt 'The ' --tokens 24 --seed 3 --temperature 0.9 > " + out).c_str()),
            0);
  // The same 24 characters; JSON carries text as UTF-8, so a byte of the corpus that is not UTF-8
  // (fortunes has Latin-1 ones) arrives as U+FFFD.
  std::string generated = read_text(out);
  ASSERT_EQ(generated.substr(0, 4), "The ");
  generated = generated.substr(4, generated.size() - 5);
  EXPECT_EQ(generated.size(), 24u);
  const std::string as_json = json{{"t", generated}}.dump(-1, ' ', false, json::error_handler_t::replace);
  EXPECT_EQ(json::parse(as_json)["t"].get<std::string>(), text);
  auto bad = s.client().Post("/v1/predict", R"({"prompt": "\u0001"})", "application/json");
  ASSERT_EQ(status_of(bad), 400) << body_of(bad);
  EXPECT_NE(bad->body.find("not in the vocabulary"), std::string::npos) << bad->body;
}

}  // namespace
}  // namespace tessera::serve
