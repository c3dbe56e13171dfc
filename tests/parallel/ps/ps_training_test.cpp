// Parameter-server training with servers and workers as threads over loopback TCP:
//   - synchronous mode equals single-process training on the global batch (1e-5 after 20 steps),
//     for dense models (SGD with momentum, Adam) and for a sparse EmbeddingBag model;
//   - sparse pushes and pulls move exactly the rows a batch touches (byte counters);
//   - bounded staleness holds its bound with one slowed worker;
//   - a lost worker stops a synchronous job with its name, and not an asynchronous one;
//   - servers checkpoint their shards and a job resumes from them bit for bit.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <unistd.h>
#include <cmath>
#include <set>
#include <thread>

#include "parallel/ddp/ddp_testing.h"
#include "parallel/ps/ps_testing.h"
#include "tessera/nn/embedding_bag.h"
#include "tessera/nn/layers.h"
#include "tessera/nn/models.h"
#include "tessera/ops/ops.h"
#include "tessera/optim/adam.h"
#include "tessera/optim/sgd.h"
#include "tessera/dist/net/framed_client.h"
#include "tessera/parallel/ps/shm_channel.h"
#include "tessera/parallel/ps/protocol.h"
#include "tessera/parallel/ps/worker.h"

namespace tessera {
namespace {

using parallel::ps::ClientOptions;
using parallel::ps::Mode;
using parallel::ps::PsWorker;
using parallel::ps::ServerOptions;
using testing::ServerThreads;
using dist::Milliseconds;

using ModelFactory = std::function<std::shared_ptr<nn::Module>()>;

struct Data {
  Tensor x, y;  // (steps, global batch, ...) and (steps, global batch)
};

Tensor rows(const Tensor& t, int64_t step, int64_t begin, int64_t end) {
  return t.slice(0, step, step + 1).squeeze(0).slice(0, begin, end).contiguous();
}

ModelFactory mlp() {
  return [] { return std::static_pointer_cast<nn::Module>(nn::make_mlp({20, 32, 16, 5})); };
}

// A bag-of-words classifier: EmbeddingBag(vocab, 8) -> Linear(8, 4).
ModelFactory bow(int64_t vocab) {
  return [vocab] {
    auto m = std::make_shared<nn::Sequential>();
    m->push_back(std::make_shared<nn::EmbeddingBag>(vocab, 8));
    m->push_back(std::make_shared<nn::Linear>(8, 4));
    return std::static_pointer_cast<nn::Module>(m);
  };
}

Data dense_data(int steps, int64_t global) {
  Generator gen(3);
  return {randn({steps, global, 20}, gen), randint(0, 5, {steps, global}, gen)};
}

Data bow_data(int steps, int64_t global, int64_t vocab) {
  Generator gen(5);
  return {randint(0, vocab, {steps, global, 6}, gen), randint(0, 4, {steps, global}, gen)};
}

parallel::ps::OptimizerSpec spec_of(const std::string& name) {
  parallel::ps::OptimizerSpec s;
  s.name = name;
  s.momentum = name == "sgd" ? 0.9 : 0.0;
  return s;
}

constexpr double kLr = 0.05;

std::shared_ptr<nn::Module> train_single(const ModelFactory& make, const Data& data, int steps, const std::string& opt_name) {
  manual_seed(7);
  auto model = make();
  std::unique_ptr<optim::Optimizer> opt;
  if (opt_name == "sgd") opt = std::make_unique<optim::SGD>(model->parameters(), optim::SGDOptions{kLr, 0.9});
  else if (opt_name == "sgd-plain") opt = std::make_unique<optim::SGD>(model->parameters(), optim::SGDOptions{kLr, 0.0});
  else opt = std::make_unique<optim::Adam>(model->parameters(), optim::AdamOptions{1e-3});
  const int64_t global = data.x.shape()[1];
  for (int s = 0; s < steps; ++s) {
    opt->zero_grad();
    cross_entropy((*model)(rows(data.x, s, 0, global)), rows(data.y, s, 0, global)).backward();
    opt->step();
  }
  return model;
}

struct PsRun {
  std::vector<std::shared_ptr<nn::Module>> models;
  std::vector<parallel::ps::ClientCounters> counters;
  std::vector<std::string> worker_errors;
  std::vector<parallel::ps::ServerReport> reports;
  std::vector<std::string> server_errors;
};

// W workers (threads) against S servers (threads); worker r trains on its share of each global
// batch and calls `each_step(r, step)` after every step (for slowing or failing a worker).
PsRun train_ps(const ModelFactory& make, const Data& data, int steps, int num_servers, int num_workers,
               ServerOptions options, std::function<void(int, int, PsWorker&)> each_step = {}) {
  options.num_workers = num_workers;
  options.timeout = Milliseconds(60000);
  PsRun run;
  for (int r = 0; r < num_workers; ++r) {
    manual_seed(r == 0 ? 7 : 100 + r);  // only worker 0's values reach the servers
    run.models.push_back(make());
  }
  run.counters.resize(num_workers);
  run.worker_errors.resize(num_workers);
  ServerThreads servers(num_servers, options);
  const double lr = options.optimizer.name == "sgd" ? kLr : 1e-3;
  const int64_t per_worker = data.x.shape()[1] / num_workers;
  std::vector<std::thread> workers;
  for (int r = 0; r < num_workers; ++r)
    workers.emplace_back([&, r] {
      try {
        ClientOptions c;
        c.rank = r;
        c.servers = servers.addresses();
        c.token = testing::kPsTestToken;
        c.timeout = Milliseconds(60000);
        PsWorker worker(run.models[r], c);
        worker.start();
        for (int s = 0; s < steps; ++s) {
          for (auto& p : run.models[r]->parameters()) p.set_grad(Tensor());
          cross_entropy((*run.models[r])(rows(data.x, s, r * per_worker, (r + 1) * per_worker)),
                        rows(data.y, s, r * per_worker, (r + 1) * per_worker))
              .backward();
          worker.step(lr);
          if (each_step) each_step(r, s, worker);
        }
        run.counters[r] = worker.counters();
        worker.finish();
      } catch (const std::exception& e) {
        run.worker_errors[r] = e.what();
      }
    });
  for (auto& t : workers) t.join();
  servers.join();
  run.reports = servers.reports;
  run.server_errors = servers.errors;
  return run;
}

ServerOptions server_options(Mode mode, const std::string& optimizer) {
  ServerOptions o;
  o.mode = mode;
  o.optimizer = spec_of(optimizer);
  return o;
}

class PsSyncEqualsSingleProcess : public ::testing::TestWithParam<std::string> {};

TEST_P(PsSyncEqualsSingleProcess, MlpParametersAfter20Steps) {
  const std::string opt = GetParam();
  Data data = dense_data(20, 8);
  auto single = train_single(mlp(), data, 20, opt);
  PsRun run = train_ps(mlp(), data, 20, 2, 2, server_options(Mode::kSync, opt));
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(run.worker_errors[r], "") << "worker " << r;
    EXPECT_LT(testing::max_parameter_difference(*single, *run.models[r]), 1e-5) << "worker " << r;
  }
  for (int s = 0; s < 2; ++s) {
    EXPECT_EQ(run.server_errors[s], "");
    EXPECT_EQ(run.reports[s].updates, 20);
    EXPECT_EQ(run.reports[s].max_staleness, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Optimizers, PsSyncEqualsSingleProcess, ::testing::Values("sgd", "adam"));

TEST(PsSharedMemory, ValuesThroughSharedMemoryAndThroughTcpGiveTheSameBits) {
  Data data = dense_data(10, 8);
  std::atomic<int> outside_the_segment{0};  // dense parameters or gradients found elsewhere, with shm on
  auto run_with = [&](const char* shm_setting, std::vector<int>& channels) {
    ::setenv("TESSERA_PS_SHM", shm_setting, 1);
    channels.assign(2, -1);
    PsRun run = train_ps(mlp(), data, 10, 2, 2, server_options(Mode::kSync, "adam"), [&](int r, int, PsWorker& w) {
      channels[static_cast<size_t>(r)] = w.shared_memory_servers();
      const auto& segment = w.shared_memory();
      if (!segment) return;
      auto inside = [&](const float* p, const float* region) { return p >= region && p < region + segment->dense(); };
      for (const Tensor& p : w.parameters())
        if (!inside(p.data<float>(), segment->pull_region()) || !inside(p.grad().data<float>(), segment->push_region()))
          ++outside_the_segment;
    });
    ::unsetenv("TESSERA_PS_SHM");
    return run;
  };
  std::vector<int> tcp_channels, shm_channels;
  PsRun tcp = run_with("0", tcp_channels);
  PsRun shm = run_with("1", shm_channels);
  EXPECT_EQ(tcp_channels, (std::vector<int>{0, 0}));
  EXPECT_EQ(shm_channels, (std::vector<int>{2, 2})) << "both servers run in this process's machine";
  EXPECT_EQ(outside_the_segment.load(), 0) << "each step's gradients and values must go through the segment in place";
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(tcp.worker_errors[r], "");
    ASSERT_EQ(shm.worker_errors[r], "");
    EXPECT_EQ(testing::max_parameter_difference(*tcp.models[r], *shm.models[r]), 0.0) << "worker " << r;
    EXPECT_EQ(tcp.counters[r].dense_bytes_pushed, shm.counters[r].dense_bytes_pushed);
    EXPECT_EQ(tcp.counters[r].dense_bytes_pulled, shm.counters[r].dense_bytes_pulled);
  }
  for (int s = 0; s < 2; ++s) EXPECT_EQ(shm.reports[s].updates, 10);
}

TEST(PsSparse, SyncEmbeddingBagEqualsSingleProcessAndMovesOnlyTouchedRows) {
  const int64_t vocab = 5000;
  const int steps = 20;
  Data data = bow_data(steps, 8, vocab);
  // Plain SGD: the lazy row update equals the dense one exactly (momentum would differ by design).
  auto single = train_single(bow(vocab), data, steps, "sgd-plain");
  ServerOptions o = server_options(Mode::kSync, "sgd");
  o.optimizer.momentum = 0.0;
  PsRun run = train_ps(bow(vocab), data, steps, 2, 2, o);
  for (int r = 0; r < 2; ++r) ASSERT_EQ(run.worker_errors[r], "") << "worker " << r;
  // Worker 0's local table is never trained (rows live on the servers): compare the served rows.
  // Pull the final table through a fresh worker-side view: the dense Linear must match directly.
  auto single_params = single->named_parameters();
  for (int r = 0; r < 2; ++r) {
    auto params = run.models[r]->named_parameters();
    for (size_t i = 0; i < params.size(); ++i) {
      if (params[i].first.find("weight") != std::string::npos && params[i].second.dim() == 2 &&
          params[i].second.shape()[0] == vocab)
        continue;
      auto a = params[i].second.to_vector<float>(), b = single_params[i].second.to_vector<float>();
      double worst = 0;
      for (size_t k = 0; k < a.size(); ++k) worst = std::max(worst, std::fabs(double(a[k]) - b[k]));
      EXPECT_LT(worst, 1e-5) << params[i].first << " of worker " << r;
    }
  }
  // Bytes: exactly the distinct rows of each worker's batches, each way, with 8-byte ids.
  const int64_t per_worker = 4, row_bytes = 8 * sizeof(float);
  for (int r = 0; r < 2; ++r) {
    int64_t touched = 0;
    for (int s = 0; s < steps; ++s) {
      auto ids = rows(data.x, s, r * per_worker, (r + 1) * per_worker).to_vector<int64_t>();
      touched += static_cast<int64_t>(std::set<int64_t>(ids.begin(), ids.end()).size());
    }
    const auto& c = run.counters[r];
    EXPECT_EQ(c.sparse_rows_pulled, touched) << "worker " << r;
    EXPECT_EQ(c.sparse_rows_pushed, touched) << "worker " << r;
    EXPECT_EQ(c.sparse_bytes_pushed, touched * (row_bytes + 8)) << "worker " << r;
    EXPECT_EQ(c.sparse_bytes_pulled, touched * (row_bytes + 8)) << "worker " << r;
    // The dense part is the Linear(8, 4) only: 36 floats each way per step (plus the first pull).
    EXPECT_EQ(c.dense_bytes_pushed, steps * 36 * 4) << "worker " << r;
    EXPECT_EQ(c.dense_bytes_pulled, (steps + 1) * 36 * 4) << "worker " << r;
    EXPECT_LT(c.total_bytes(), vocab * row_bytes) << "less than one copy of the table";
  }
}

TEST(PsSparse, FinalTableOnTheServersEqualsSingleProcess) {
  const int64_t vocab = 3000;
  const int steps = 10;
  Data data = bow_data(steps, 8, vocab);
  auto single = train_single(bow(vocab), data, steps, "sgd-plain");
  ServerOptions o = server_options(Mode::kSync, "sgd");
  o.optimizer.momentum = 0.0;
  PsRun run = train_ps(bow(vocab), data, steps, 2, 2, o, [&](int r, int s, PsWorker& worker) {
    if (r == 0 && s == steps - 1) worker.pull_sparse_tables();  // into worker 0's local table
  });
  ASSERT_EQ(run.worker_errors[0], "");
  auto table = run.models[0]->named_parameters()[0].second.to_vector<float>();
  auto expected = single->named_parameters()[0].second.to_vector<float>();
  ASSERT_EQ(table.size(), expected.size());
  double worst = 0;
  for (size_t k = 0; k < table.size(); ++k) worst = std::max(worst, std::fabs(double(table[k]) - expected[k]));
  EXPECT_LT(worst, 1e-6);
}

TEST(PsBoundedStaleness, NoWorkerRunsMoreThanTheBoundAheadOfASlowedOne) {
  const int steps = 12, staleness = 2;
  Data data = dense_data(steps, 12);
  ServerOptions o = server_options(Mode::kBoundedStaleness, "sgd");
  o.staleness = staleness;
  // The slow worker's pushes, counted before each is sent: when a fast worker's pull for step t
  // returns, the servers had the slow worker's push of step t - staleness - 1, so at least
  // t - staleness pushes had started. This holds whatever the timing.
  std::atomic<int> slow_pushes{1};  // its first push starts with the job
  std::atomic<int> violations{0};
  PsRun run = train_ps(mlp(), data, steps, 1, 3, o, [&](int r, int s, PsWorker&) {
    if (r == 2) {
      slow_pushes = s + 1;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the artificial straggler
      slow_pushes = s + 2;  // the next step's push is about to start
    } else if (slow_pushes.load() < (s + 1) - staleness) {
      ++violations;
    }
  });
  for (int r = 0; r < 3; ++r) ASSERT_EQ(run.worker_errors[r], "") << "worker " << r;
  ASSERT_EQ(run.server_errors[0], "");
  EXPECT_EQ(violations.load(), 0);
  std::printf("bounded staleness %d: largest staleness seen %lld\n", staleness,
              static_cast<long long>(run.reports[0].max_staleness));
  EXPECT_LE(run.reports[0].max_staleness, staleness);
  EXPECT_EQ(run.reports[0].updates, 3 * steps);  // every push applied at once
}

TEST(PsFaults, ALostWorkerStopsASynchronousJobNamingIt) {
  Data data = dense_data(10, 8);
  PsRun run = train_ps(mlp(), data, 10, 1, 2, server_options(Mode::kSync, "sgd"), [](int r, int s, PsWorker&) {
    if (r == 1 && s == 3) throw Error("worker 1 crashes");  // its connections close: as a killed process
  });
  EXPECT_NE(run.server_errors[0].find("worker 1"), std::string::npos) << run.server_errors[0];
  EXPECT_NE(run.server_errors[0].find("synchronous"), std::string::npos) << run.server_errors[0];
  EXPECT_NE(run.worker_errors[0], "") << "worker 0 must fail, not hang";
}

TEST(PsFaults, AnAsynchronousJobGoesOnWithoutALostWorker) {
  Data data = dense_data(10, 12);
  PsRun run = train_ps(mlp(), data, 10, 2, 3, server_options(Mode::kAsync, "sgd"), [](int r, int s, PsWorker&) {
    if (r == 1 && s == 3) throw Error("worker 1 crashes");
  });
  EXPECT_EQ(run.worker_errors[0], "");
  EXPECT_EQ(run.worker_errors[2], "");
  for (int s = 0; s < 2; ++s) {
    EXPECT_EQ(run.server_errors[s], "");
    EXPECT_EQ(run.reports[s].lost_workers, std::vector<int>{1});
    EXPECT_EQ(run.reports[s].updates, 10 + 4 + 10);
  }
}

// A job of `before` servers saves step 6; a job of `after` servers resumes it (the servers reshard
// the values and the optimizer's state when the counts differ) and ends bit for bit where the
// uninterrupted job of `before` servers does: synchronous PS training is single-process training
// element for element, however the model is cut.
class PsCheckpoint : public ::testing::TestWithParam<std::tuple<int, int, std::string>> {};

TEST_P(PsCheckpoint, ServersResumeFromTheShardsOfAnyNumberOfServersAndTrainingContinuesExactly) {
  const auto [before, after, model_name] = GetParam();
  const ModelFactory make = model_name == "bow" ? bow(50) : mlp();
  const int steps = 12;
  Data data = model_name == "bow" ? bow_data(steps, 8, 50) : dense_data(steps, 8);
  auto dir = std::filesystem::temp_directory_path() /
             ("tessera_ps_ckpt_" + std::to_string(before) + std::to_string(after) + model_name + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  // Adam on the dense MLP; SGD with momentum on the bag of words (its sparse rows' momentum moves too).
  ServerOptions o = server_options(Mode::kSync, model_name == "bow" ? "sgd" : "adam");
  const double lr = model_name == "bow" ? kLr : 1e-3;
  // Sparse tables live on the servers: worker 0 pulls them in after the last step to compare.
  PsRun whole = train_ps(make, data, steps, before, 2, o, [&](int r, int s, PsWorker& worker) {
    if (r == 0 && s == steps - 1) worker.pull_sparse_tables();
  });
  // The same job in two halves: the first saves at step 6 and ends; the second restores.
  Data first{data.x.slice(0, 0, 6).contiguous(), data.y.slice(0, 0, 6).contiguous()};
  PsRun half = train_ps(make, first, 6, before, 2, o, [&](int r, int s, PsWorker& worker) {
    if (r == 0 && s == 5) worker.save(dir.string(), 6);
  });
  ASSERT_EQ(half.worker_errors[0], "");
  ASSERT_TRUE(std::filesystem::exists(parallel::ps::server_checkpoint_path(dir.string(), before - 1, 6)));
  // Resume: fresh servers, fresh models (different values: the checkpoint must win).
  o.num_workers = 2;
  o.timeout = Milliseconds(60000);
  ServerThreads servers(after, o);
  std::vector<std::shared_ptr<nn::Module>> models;
  for (int r = 0; r < 2; ++r) {
    manual_seed(900 + r);
    models.push_back(make());
  }
  std::vector<std::string> errors(2);
  std::vector<std::thread> workers;
  for (int r = 0; r < 2; ++r)
    workers.emplace_back([&, r] {
      try {
        ClientOptions c;
        c.rank = r;
        c.servers = servers.addresses();
        c.token = testing::kPsTestToken;
        PsWorker worker(models[r], c);
        worker.start(6, r == 0 ? dir.string() : "");
        for (int s = 6; s < steps; ++s) {
          for (auto& p : models[r]->parameters()) p.set_grad(Tensor());
          cross_entropy((*models[r])(rows(data.x, s, r * 4, (r + 1) * 4)), rows(data.y, s, r * 4, (r + 1) * 4)).backward();
          worker.step(lr);
        }
        if (r == 0) worker.pull_sparse_tables();
        worker.finish();
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  for (auto& t : workers) t.join();
  servers.join();
  ASSERT_EQ(errors[0], "");
  ASSERT_EQ(errors[1], "");
  for (const std::string& e : servers.errors) ASSERT_EQ(e, "");
  EXPECT_EQ(testing::max_parameter_difference(*whole.models[0], *models[0]), 0.0);
  std::filesystem::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Servers, PsCheckpoint,
                         ::testing::Values(std::make_tuple(2, 2, std::string("mlp")), std::make_tuple(2, 3, std::string("mlp")),
                                           std::make_tuple(3, 1, std::string("mlp")), std::make_tuple(2, 2, std::string("bow")),
                                           std::make_tuple(2, 3, std::string("bow")),
                                           std::make_tuple(3, 2, std::string("bow"))),
                         [](const auto& info) {
                           return std::get<2>(info.param) + std::to_string(std::get<0>(info.param)) + "To" +
                                  std::to_string(std::get<1>(info.param));
                         });

TEST(PsProtocol, AWrongTokenIsRejectedAndAModelMismatchNamesTheParameter) {
  ServerOptions o = server_options(Mode::kSync, "sgd");
  o.num_workers = 2;
  ServerThreads servers(1, o);
  ClientOptions bad;
  bad.rank = 0;
  bad.servers = servers.addresses();
  bad.token = "not-the-token";
  bad.timeout = Milliseconds(5000);
  try {
    parallel::ps::PsClient client(bad);
    FAIL() << "a wrong token was accepted";
  } catch (const PeerFailureError& e) {
    EXPECT_NE(std::string(e.what()).find("wrong job token"), std::string::npos) << e.what();
  }
  ClientOptions good = bad;
  good.token = testing::kPsTestToken;
  parallel::ps::PsClient first(good);
  first.register_model({{"fc.weight", 4, 3, false}}, 0);
  good.rank = 1;
  parallel::ps::PsClient second(good);
  try {
    second.register_model({{"fc.weight", 4, 5, false}}, 0);
    FAIL() << "a different model was accepted";
  } catch (const PeerFailureError& e) {
    EXPECT_NE(std::string(e.what()).find("'fc.weight' 4x5"), std::string::npos) << e.what();
  }
  servers.servers[0]->stop();
}

// A connection that says hello as worker `rank` and then speaks the protocol by hand.
dist::net::FramedClientOptions raw_connection(const std::string& server, int rank) {
  dist::net::FramedClientOptions raw;
  auto colon = server.rfind(':');
  raw.host = server.substr(0, colon);
  raw.port = static_cast<uint16_t>(std::stoi(server.substr(colon + 1)));
  raw.token = testing::kPsTestToken;
  raw.protocol_version = parallel::ps::kPsProtocolVersion;
  raw.rank = rank;
  return raw;
}

// One asynchronous server for 2 workers, and worker 0 registered with it over a PsClient.
struct OneServerAndAGoodWorker {
  OneServerAndAGoodWorker() : servers(1, options()), c(client_options(servers.addresses())), good(c) {
    good.register_model({{"b", 4, 1, false}}, 0);
  }
  static ServerOptions options() {
    ServerOptions o = server_options(Mode::kAsync, "sgd");
    o.num_workers = 2;
    return o;
  }
  static ClientOptions client_options(std::vector<std::string> addresses) {
    ClientOptions c;
    c.servers = std::move(addresses);
    c.token = testing::kPsTestToken;
    c.timeout = Milliseconds(5000);
    c.rank = 0;
    return c;
  }
  ServerThreads servers;
  ClientOptions c;
  parallel::ps::PsClient good;
};

TEST(PsProtocol, ASharedMemoryOfferThatDoesNotCheckOutIsDeclinedAndMisuseDropsTheConnection) {
  OneServerAndAGoodWorker job;
  auto& [servers, c, good] = job;
  EXPECT_EQ(good.attach_shared_memory(), 1);
  dist::net::FramedClient evil(raw_connection(c.servers[0], 1));
  auto deadline = dist::detail::deadline_after(Milliseconds(5000));
  evil.send(parallel::ps::FrameWriter(uint8_t(parallel::ps::PsOp::kRegister)).i64(0).u32(1).str("b").i64(4).i64(1).u8(0).finish(),
            deadline, "register");
  EXPECT_EQ(evil.receive(deadline, "register")[0], uint8_t(parallel::ps::PsReply::kOk));
  auto offer = [&](const std::string& name, int64_t bytes, const parallel::ps::ShmNonce& nonce, int64_t floats,
                   int64_t offset = 0) {
    parallel::ps::FrameWriter w(uint8_t(parallel::ps::PsOp::kAttachShm));
    w.str(name).i64(bytes).bytes(nonce.data(), nonce.size()).u32(1).u32(0).i64(offset).i64(floats);
    evil.send(w.finish(), deadline, "attach");
    dist::Bytes reply = evil.receive(deadline, "attach");
    EXPECT_EQ(reply[0], uint8_t(parallel::ps::PsReply::kAttached));
    parallel::ps::FrameReader r(reply.data() + 1, reply.size() - 1);
    EXPECT_EQ(r.u8(), 0) << "accepted " << name;
    return r.str();
  };
  const size_t bytes = parallel::ps::ShmChannel::bytes_for(4);
  // A name that does not exist (a server on another machine sees this), another file's name, and a
  // segment whose header holds another nonce (not the one this worker made).
  EXPECT_NE(offer("/tessera-shm-0-0-0", static_cast<int64_t>(bytes), {}, 4).find("cannot open"), std::string::npos);
  EXPECT_NE(offer("/../etc/passwd", static_cast<int64_t>(bytes), {}, 4).find("not the name of"), std::string::npos);
  parallel::ps::ShmChannel theirs = parallel::ps::ShmChannel::create(4);
  parallel::ps::ShmNonce wrong = theirs.nonce();
  wrong[0] ^= 1;
  EXPECT_NE(offer(theirs.name(), static_cast<int64_t>(bytes), wrong, 4).find("header differs"), std::string::npos);
  EXPECT_NE(offer(theirs.name(), static_cast<int64_t>(bytes), theirs.nonce(), 3).find("not this server's"), std::string::npos);
  EXPECT_NE(offer(theirs.name(), static_cast<int64_t>(bytes), theirs.nonce(), 4, 1).find("not where the shard plan"),
            std::string::npos);
  dist::detail::ShmSegment::unlink(theirs.name());
  // Declined, the connection still serves; but a push through shared memory without a channel
  // drops it.
  good.initialize({std::vector<float>{1, 2, 3, 4}.data()});
  evil.send(parallel::ps::FrameWriter(uint8_t(parallel::ps::PsOp::kPushShm)).i64(0).i64(0).u32(0).u32(0).finish(), deadline, "push");
  EXPECT_THROW(evil.receive(deadline, "push"), PeerFailureError);
  // The good worker goes on through its channel.
  std::vector<float> values(4);
  good.pull(0, {values.data()}, {});
  EXPECT_EQ(values, (std::vector<float>{1, 2, 3, 4}));
  servers.servers[0]->stop();
}

TEST(PsProtocol, AMalformedFrameDropsOnlyThatConnection) {
  OneServerAndAGoodWorker job;
  auto& [servers, c, good] = job;
  // A raw connection that says hello, then sends a push whose float array has the wrong length.
  dist::net::FramedClient evil(raw_connection(c.servers[0], 1));
  auto deadline = dist::detail::deadline_after(Milliseconds(5000));
  evil.send(parallel::ps::FrameWriter(uint8_t(parallel::ps::PsOp::kRegister)).u32(7).finish(), deadline, "garbage");
  EXPECT_THROW(evil.receive(deadline, "garbage"), PeerFailureError);  // dropped: the server closes it
  // The server still serves the good worker.
  good.initialize({std::vector<float>{1, 2, 3, 4}.data()});
  std::vector<float> values(4);
  good.pull(0, {values.data()}, {});
  EXPECT_EQ(values, (std::vector<float>{1, 2, 3, 4}));
  servers.servers[0]->stop();
}

}  // namespace
}  // namespace tessera
