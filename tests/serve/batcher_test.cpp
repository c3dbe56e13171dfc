#include "tessera/serve/batcher.h"

#include <gtest/gtest.h>

#include <atomic>
#include <latch>

#include "tessera/core/error.h"
#include "tessera/ops/ops.h"
#include "tessera/serve/metrics.h"

namespace tessera::serve {
namespace {

using namespace std::chrono_literals;

Tensor rows_of(std::vector<float> firsts) {  // one row [v, 10 v] per value
  std::vector<float> v;
  for (float f : firsts) v.insert(v.end(), {f, 10 * f});
  return from_vector(v, {static_cast<int64_t>(firsts.size()), 2});
}

TEST(DynamicBatcher, EachRequestGetsItsOwnRowsOfTheBatchesOutput) {
  std::vector<int64_t> sizes;
  std::mutex m;
  // The model doubles its input; a gate holds the first batch so the others queue behind it.
  std::latch first_running(1), release(1);
  std::atomic<int> runs{0};
  DynamicBatcher b({/*max_batch=*/4, 10s},
                   [&](const Tensor& x) {
                     if (runs.fetch_add(1) == 0) {
                       first_running.count_down();
                       release.wait();
                     }
                     return mul(x, 2.0f);
                   },
                   [&](int64_t n) {
                     std::lock_guard<std::mutex> lock(m);
                     sizes.push_back(n);
                   });
  auto f0 = b.submit(rows_of({100, 101, 102, 103}));  // a full batch: runs at once
  first_running.wait();
  std::vector<std::future<Tensor>> later;
  for (float v : {1.f, 2.f, 3.f}) later.push_back(b.submit(rows_of({v})));
  later.push_back(b.submit(rows_of({4, 5})));  // does not fit beside the three: the batch after
  later.push_back(b.submit(rows_of({6, 7, 8, 9, 10, 11})));  // more than max_batch: alone
  release.count_down();
  EXPECT_EQ(f0.get().to_vector<float>(), (std::vector<float>{200, 2000, 202, 2020, 204, 2040, 206, 2060}));
  for (int i = 0; i < 3; ++i) EXPECT_EQ(later[i].get().to_vector<float>(), (std::vector<float>{2.f * (i + 1), 20.f * (i + 1)}));
  EXPECT_EQ(later[3].get().to_vector<float>(), (std::vector<float>{8, 80, 10, 100}));
  EXPECT_EQ(later[4].get().shape(), (Shape{6, 2}));
  b.stop();
  EXPECT_EQ(sizes, (std::vector<int64_t>{4, 3, 2, 6}));
}

TEST(DynamicBatcher, ALoneRequestRunsAfterMaxWait) {
  DynamicBatcher b({32, 1ms}, [](const Tensor& x) { return x; });
  // Nothing else arrives: the batch of one is cut at the deadline (the test's own bound is ctest's).
  EXPECT_EQ(b.submit(rows_of({5})).get().to_vector<float>(), (std::vector<float>{5, 50}));
}

TEST(DynamicBatcher, AdaptiveWaitingRunsALoneRequestAtOnceButWaitsForOneAnnounced) {
  std::vector<int64_t> sizes;
  std::mutex m;
  // An hour's max wait: if adaptive waiting did not cut it, these would hang (and ctest end them).
  DynamicBatcher b({8, std::chrono::hours(1), /*adaptive=*/true}, [](const Tensor& x) { return x; },
                   [&](int64_t n) {
                     std::lock_guard<std::mutex> lock(m);
                     sizes.push_back(n);
                   });
  EXPECT_EQ(b.submit(rows_of({1})).get().to_vector<float>(), (std::vector<float>{1, 10}));  // nobody else: at once
  // A second request is being read: the first waits for it, and the two run as one batch.
  b.announce();
  b.announce();
  auto first = b.submit(rows_of({2}), /*announced=*/true);
  EXPECT_EQ(first.wait_for(std::chrono::milliseconds(50)), std::future_status::timeout);
  auto second = b.submit(rows_of({3}), /*announced=*/true);
  EXPECT_EQ(first.get().to_vector<float>()[0], 2);
  EXPECT_EQ(second.get().to_vector<float>()[0], 3);
  // One announced that never comes (a bad request): its withdrawal releases the batch.
  b.announce();
  b.announce();
  auto third = b.submit(rows_of({4}), /*announced=*/true);
  b.withdraw();
  EXPECT_EQ(third.get().to_vector<float>()[0], 4);
  b.stop();
  EXPECT_EQ(sizes, (std::vector<int64_t>{1, 2, 1}));
}

TEST(DynamicBatcher, ABatchThatFailsFailsEachOfItsRequests) {
  DynamicBatcher b({8, 0ms}, [](const Tensor& x) -> Tensor { throw ValueError("model refused " + shape_str(x.shape())); });
  auto f = b.submit(rows_of({1, 2}));
  EXPECT_THROW(f.get(), ValueError);
  // A model answering the wrong number of rows is an error too, never a wrong slice.
  DynamicBatcher short_answer({8, 0ms}, [](const Tensor& x) { return x.slice(0, 0, 1); });
  EXPECT_THROW(short_answer.submit(rows_of({1, 2})).get(), ValueError);
}

TEST(DynamicBatcher, StopAnswersWhatIsQueuedAndRefusesWhatComesAfter) {
  std::latch running(1), release(1);
  std::atomic<int> runs{0};
  DynamicBatcher b({1, 0ms}, [&](const Tensor& x) {
    if (runs.fetch_add(1) == 0) {
      running.count_down();
      release.wait();
    }
    return x;
  });
  auto first = b.submit(rows_of({1}));
  running.wait();
  auto queued = b.submit(rows_of({2}));
  std::thread stopper([&] { b.stop(); });
  release.count_down();
  stopper.join();
  EXPECT_EQ(first.get().to_vector<float>()[0], 1);
  EXPECT_EQ(queued.get().to_vector<float>()[0], 2);
  EXPECT_THROW(b.submit(rows_of({3})).get(), ValueError);
}

TEST(ServeMetrics, ThePrometheusTextCountsRequestsLatencyAndBatches) {
  ServeMetrics m(8);
  m.request_done("/v1/predict", 200, 0.003);
  m.request_done("/v1/predict", 400, 0.0001);
  m.request_done("/healthz", 200, 0);
  m.batch_done(3);
  m.batch_done(8);
  const std::string t = m.prometheus_text();
  EXPECT_NE(t.find("tessera_serve_requests_total{route=\"/v1/predict\",code=\"200\"} 1\n"), std::string::npos) << t;
  EXPECT_NE(t.find("tessera_serve_errors_total{kind=\"client\"} 1\n"), std::string::npos);
  EXPECT_NE(t.find("tessera_serve_request_duration_seconds_bucket{le=\"0.0025\"} 1\n"), std::string::npos) << t;
  EXPECT_NE(t.find("tessera_serve_request_duration_seconds_bucket{le=\"0.005\"} 2\n"), std::string::npos);
  EXPECT_NE(t.find("tessera_serve_request_duration_seconds_count 2\n"), std::string::npos);
  EXPECT_NE(t.find("tessera_serve_batch_size_bucket{le=\"4\"} 1\n"), std::string::npos) << t;
  EXPECT_NE(t.find("tessera_serve_batch_size_bucket{le=\"8\"} 2\n"), std::string::npos);
  EXPECT_NE(t.find("tessera_serve_samples_total 11\n"), std::string::npos);
  EXPECT_NE(t.find("# TYPE tessera_serve_batch_size histogram\n"), std::string::npos);
}

}  // namespace
}  // namespace tessera::serve
