// DDP comm hooks on the threaded backend (tier 1), world sizes 1–4: every hook against the exact
// average of the ranks' gradients (computed in double), the byte counters against the payload
// each hook is documented to send, and the error feedback of topk and PowerSGD.
//
// A run hands each rank the same buckets as the reducer does: every bucket started in index
// order, then every bucket finished, so several buckets are in flight at once.
#include "tessera/parallel/ddp/comm_hook.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>

#include "parallel/threaded_group.h"
#include "tessera/core/half_codec.h"
#include "tessera/parallel/ddp/topk_hook.h"

namespace tessera {
namespace {

using parallel::ddp::BucketView;
using parallel::ddp::CommHookOptions;
using parallel::ddp::make_comm_hook;

using Layout = std::vector<Shape>;  // one bucket's parameter shapes
using Vector = std::vector<float>;
// Rank r's gradient at step s: every bucket's elements back to back.
using GradientFn = std::function<Vector(int rank, int step, int64_t numel)>;

using testing::threaded;

dist::ProcessGroupOptions short_timeout() {
  dist::ProcessGroupOptions o;
  o.timeout = std::chrono::seconds(60);  // a broken hook fails the test instead of hanging it
  return o;
}

int64_t numel_of(const Layout& layout) {
  int64_t n = 0;
  for (const Shape& s : layout) n += shape_numel(s);
  return n;
}

int64_t numel_of(const std::vector<Layout>& buckets) {
  int64_t n = 0;
  for (const Layout& l : buckets) n += numel_of(l);
  return n;
}

BucketView make_bucket(int index, const Layout& layout, int divisor) {
  BucketView b;
  b.index = index;
  b.shapes = layout;
  int64_t offset = 0;
  for (const Shape& s : layout) {
    b.offsets.push_back(offset);
    offset += shape_numel(s);
  }
  b.flat = zeros({offset});
  b.divisor = divisor;
  return b;
}

struct HookRun {
  std::vector<std::vector<Vector>> results;  // [rank][step]: every bucket after finish, back to back
  std::vector<int64_t> bytes;                // [rank]: bytes_communicated() at the end
};

HookRun run_hook(int world, const std::string& hook_name, const CommHookOptions& options,
                 const std::vector<Layout>& buckets, int steps, const GradientFn& gradient, int divisor = 0) {
  HookRun run;
  run.results.resize(static_cast<size_t>(world));
  run.bytes.resize(static_cast<size_t>(world));
  int64_t total = numel_of(buckets);
  testing::run_on_threads(
      world, threaded(world),
      [&](dist::ProcessGroup& group) {
        int r = group.rank();
        auto hook = make_comm_hook(hook_name, options);
        std::vector<BucketView> views;
        for (size_t b = 0; b < buckets.size(); ++b)
          views.push_back(make_bucket(static_cast<int>(b), buckets[b], divisor > 0 ? divisor : world));
        for (int s = 0; s < steps; ++s) {
          Vector g = gradient(r, s, total);
          int64_t at = 0;
          for (BucketView& v : views) {
            std::memcpy(v.flat.data<float>(), g.data() + at, v.flat.numel() * sizeof(float));
            at += v.flat.numel();
          }
          for (BucketView& v : views) hook->start(group, v);
          for (BucketView& v : views) hook->finish(group, v);
          Vector result;
          for (BucketView& v : views) {
            const float* p = v.flat.data<float>();
            result.insert(result.end(), p, p + v.flat.numel());
          }
          run.results[static_cast<size_t>(r)].push_back(std::move(result));
        }
        run.bytes[static_cast<size_t>(r)] = hook->bytes_communicated();
      },
      short_timeout());
  return run;
}

// Standard normal gradients, different for every rank and step.
Vector random_gradient(int rank, int step, int64_t numel) {
  Generator gen(static_cast<uint64_t>(1000 * rank + step + 1));
  Vector g(static_cast<size_t>(numel));
  for (float& x : g) x = gen.normal();
  return g;
}

// The exact average over ranks (in double) and the mean magnitude of the inputs, per element.
struct Reference {
  std::vector<double> average, mean_magnitude;
};

Reference reference(int world, int step, int64_t numel, const GradientFn& gradient) {
  Reference ref{std::vector<double>(static_cast<size_t>(numel), 0.0),
                std::vector<double>(static_cast<size_t>(numel), 0.0)};
  for (int r = 0; r < world; ++r) {
    Vector g = gradient(r, step, numel);
    for (size_t i = 0; i < g.size(); ++i) {
      ref.average[i] += double(g[i]) / world;
      ref.mean_magnitude[i] += std::fabs(double(g[i])) / world;
    }
  }
  return ref;
}

// |got - average| <= relative · (mean |input| + |average|) + absolute, element by element.
void expect_close(const Vector& got, const Reference& ref, double relative, double absolute, const std::string& what) {
  ASSERT_EQ(got.size(), ref.average.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    double tolerance = relative * (ref.mean_magnitude[i] + std::fabs(ref.average[i])) + absolute;
    ASSERT_LE(std::fabs(double(got[i]) - ref.average[i]), tolerance)
        << what << ": element " << i << " is " << got[i] << ", exact average " << ref.average[i];
  }
}

void expect_same_on_every_rank(const HookRun& run) {
  for (size_t r = 1; r < run.results.size(); ++r)
    for (size_t s = 0; s < run.results[r].size(); ++s)
      ASSERT_EQ(
          std::memcmp(run.results[r][s].data(), run.results[0][s].data(), run.results[0][s].size() * sizeof(float)), 0)
          << "rank " << r << " step " << s << " differs from rank 0 (replicas would drift apart)";
}

// ---- every hook where it is exact, at world sizes 1–4 -------------------------------------

struct HookCase {
  std::string label, hook;
  CommHookOptions options;
  // Error bound: relative · (mean |input| + |average|) + absolute.
  double relative, absolute;
};

std::vector<HookCase> exact_cases() {
  // float32 sums of <= 4 terms: a few ulps. fp16 and bf16 round each input and the average once:
  // at most one unit roundoff u of each (2^-11, 2^-8), plus 2^-24 for fp16's subnormal spacing
  // (half a subnormal ulp on the input and on the output).
  const double sum = 1e-6;
  auto u = [](HalfFormat f) { return half_unit_roundoff(f); };
  CommHookOptions full_topk, warmup, full_rank;
  full_topk.topk_ratio = 1.0;
  warmup.powersgd_start_iter = 100;  // every step before compression starts
  full_rank.powersgd_start_iter = 0;
  full_rank.powersgd_rank = 64;  // >= min(n, m) of every matrix below: nothing is compressed
  return {
      {"none", "none", {}, sum, 0},
      {"fp16", "fp16", {}, u(HalfFormat::Fp16) + sum, 0x1p-24},
      {"bf16", "bf16", {}, u(HalfFormat::Bf16) + sum, 0},
      {"topk_ratio1", "topk", full_topk, sum, 0},
      {"powersgd_before_start_iter", "powersgd", warmup, sum, 0},
      {"powersgd_full_rank", "powersgd", full_rank, sum, 0},
  };
}

// Buckets of odd sizes: 1 element; 7·5 + 5 + 3 = 43; 33·17 + 17 + 6·2·3 = 614.
std::vector<Layout> odd_buckets() { return {{{1}}, {{7, 5}, {5}, {3}}, {{33, 17}, {17}, {6, 2, 3}}}; }

// What each hook is documented to hand to the communication layer, per step.
int64_t expected_bytes(const HookCase& c, const std::vector<Layout>& buckets, int world) {
  int64_t bytes = 0;
  for (const Layout& l : buckets) {
    int64_t n = numel_of(l);
    if (c.hook == "fp16" || c.hook == "bf16") {
      int64_t padded = (n + world - 1) / world * world;
      bytes += 2 * padded + 2 * padded / world;  // alltoall of everything, allgather of one block
    } else if (c.hook == "topk") {
      bytes += 8 * parallel::ddp::TopKHook(c.options.topk_ratio).k_for(n);  // 2k float32
    } else {
      bytes += 4 * n;  // the float32 bucket
    }
  }
  return bytes;
}

class CommHookExact : public ::testing::TestWithParam<std::tuple<HookCase, int>> {};

TEST_P(CommHookExact, MatchesTheAverageOfTheRanks) {
  const auto& [c, world] = GetParam();
  const int steps = 3;
  auto buckets = odd_buckets();
  HookRun run = run_hook(world, c.hook, c.options, buckets, steps, random_gradient);
  int64_t numel = numel_of(buckets);
  for (int r = 0; r < world; ++r)
    for (int s = 0; s < steps; ++s)
      expect_close(run.results[static_cast<size_t>(r)][static_cast<size_t>(s)],
                   reference(world, s, numel, random_gradient), c.relative, c.absolute,
                   "rank " + std::to_string(r) + " step " + std::to_string(s));
  expect_same_on_every_rank(run);
  for (int r = 0; r < world; ++r)
    EXPECT_EQ(run.bytes[static_cast<size_t>(r)], steps * expected_bytes(c, buckets, world));
}

INSTANTIATE_TEST_SUITE_P(Hooks, CommHookExact,
                         ::testing::Combine(::testing::ValuesIn(exact_cases()), ::testing::Values(1, 2, 3, 4)),
                         [](const auto& info) {
                           return std::get<0>(info.param).label + "_" + std::to_string(std::get<1>(info.param)) +
                                  "ranks";
                         });

// A divisor other than the group's size (ranks that joined early contribute zeros): 3 ranks,
// divisor 2, so every hook must divide the sum itself rather than average.
TEST(CommHookDivisor, EveryHookDividesTheSumByTheBucketsDivisor) {
  const int world = 3, divisor = 2;
  auto buckets = odd_buckets();
  int64_t numel = numel_of(buckets);
  GradientFn scaled = [&](int r, int s, int64_t n) {  // reference() averages: scale by world / divisor
    Vector g = random_gradient(r, s, n);
    for (float& x : g) x *= static_cast<float>(world) / divisor;
    return g;
  };
  for (const HookCase& c : exact_cases()) {
    HookRun run = run_hook(world, c.hook, c.options, buckets, 1, random_gradient, divisor);
    expect_close(run.results[0][0], reference(world, 0, numel, scaled), c.relative, c.absolute, c.label);
  }
}

// fp16 and bf16 on values that stress the format: subnormals, halfway cases, large magnitudes.
class CommHookHalfRange : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

TEST_P(CommHookHalfRange, StaysWithinOneRoundingOfEachSide) {
  const auto& [hook, world] = GetParam();
  auto format = hook == "fp16" ? HalfFormat::Fp16 : HalfFormat::Bf16;
  // Magnitudes from 2^-27 to 2^15 (below fp16's smallest subnormal to just under its overflow),
  // different on every rank.
  GradientFn wide = [](int rank, int step, int64_t numel) {
    Vector g = random_gradient(rank, step, numel);
    for (size_t i = 0; i < g.size(); ++i)
      g[i] = std::ldexp(g[i], static_cast<int>((i * 7 + static_cast<size_t>(rank)) % 40) - 27);
    return g;
  };
  std::vector<Layout> buckets = {{{1021}}};
  HookRun run = run_hook(world, hook, {}, buckets, 2, wide);
  for (int s = 0; s < 2; ++s)
    expect_close(run.results[0][static_cast<size_t>(s)], reference(world, s, 1021, wide),
                 half_unit_roundoff(format) + 1e-6,
                 format == HalfFormat::Fp16 ? 0x1p-24 : 0, hook);
  expect_same_on_every_rank(run);
}

INSTANTIATE_TEST_SUITE_P(Formats, CommHookHalfRange,
                         ::testing::Combine(::testing::Values("fp16", "bf16"), ::testing::Values(1, 2, 3, 4)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_" + std::to_string(std::get<1>(info.param)) + "ranks";
                         });

// ---- compression ratios ----------------------------------------------------------------------

class CommHookBytes : public ::testing::TestWithParam<int> {};

TEST_P(CommHookBytes, CountersShowTheCompression) {
  int world = GetParam();
  // 100·50 + 50 + 7 = 5057 float32 = 20228 bytes per step uncompressed.
  std::vector<Layout> buckets = {{{100, 50}, {50}, {7}}};
  const int64_t n = 5057, none = 4 * n;
  auto bytes = [&](const std::string& hook, const CommHookOptions& options) {
    return run_hook(world, hook, options, buckets, 1, random_gradient).bytes[0];
  };
  EXPECT_EQ(bytes("none", {}), none);
  // fp16: alltoall of the padded bucket plus allgather of one block: (1 + 1/size)/2 of none
  // (plus padding), which is exactly half of a ring all-reduce's traffic.
  int64_t padded = (n + world - 1) / world * world;
  EXPECT_EQ(bytes("fp16", {}), 2 * padded + 2 * padded / world);
  EXPECT_EQ(bytes("bf16", {}), 2 * padded + 2 * padded / world);
  if (world > 1) {
    EXPECT_LE(bytes("fp16", {}), 0.75 * none + 8);
  }
  // topk at 0.01: k = ceil(50.57) = 51 pairs of float32 = 408 bytes, 2.02% of none.
  CommHookOptions topk;
  topk.topk_ratio = 0.01;
  EXPECT_EQ(bytes("topk", topk), 8 * 51);
  EXPECT_LE(bytes("topk", topk), 0.0202 * none);
  // PowerSGD rank 4 from the first step: P (100, 4) and Q (50, 4) for the matrix, the 57 other
  // elements uncompressed: 4·(400 + 200 + 57) = 2628 bytes, 13% of none.
  CommHookOptions powersgd;
  powersgd.powersgd_start_iter = 0;
  EXPECT_EQ(bytes("powersgd", powersgd), 4 * (400 + 200 + 57));
}

INSTANTIATE_TEST_SUITE_P(Worlds, CommHookBytes, ::testing::Values(1, 2, 3, 4),
                         [](const auto& info) { return std::to_string(info.param) + "ranks"; });

// ---- error feedback ----------------------------------------------------------------------------

class CommHookTopK : public ::testing::TestWithParam<int> {};

// With a constant gradient g_r on each rank, top-k sends the k largest |v| of v = g_r + error. An
// entry not sent grows by g_r,i every step, so every coordinate is eventually sent, and the sum of
// the results over T steps is T·avg(g) minus the average leftover error. Since g > 0 here, the
// leftover stays below (n/k - 1)·|g_r|₁ (each step removes at least k/n of |v|₁), so the sum
// approaches the truth as 1/T; and entry i is sent within (n/k)·|g_r|₁ / g_r,i steps.
TEST_P(CommHookTopK, ErrorFeedbackSendsEveryCoordinateEventually) {
  int world = GetParam();
  const int64_t n = 64;
  CommHookOptions options;
  options.topk_ratio = 2.0 / 64;  // k = 2
  const double k = 2;
  GradientFn constant = [](int rank, int, int64_t numel) {
    Vector g(static_cast<size_t>(numel));
    for (size_t i = 0; i < g.size(); ++i)
      g[i] = 0.5f + static_cast<float>((i * 7 + static_cast<size_t>(rank) * 3) % 11) / 10.0f;
    return g;
  };
  double largest_l1 = 0, smallest = 1e30;
  for (int r = 0; r < world; ++r) {
    Vector g = constant(r, 0, n);
    double l1 = 0;
    for (float x : g) l1 += x, smallest = std::min(smallest, double(x));
    largest_l1 = std::max(largest_l1, l1);
  }
  const int steps = static_cast<int>(std::ceil(n / k * largest_l1 / smallest)) + 1;
  HookRun run = run_hook(world, "topk", options, {{{n}}}, steps, constant);
  Reference truth = reference(world, 0, n, constant);
  std::vector<double> total(n, 0.0);
  for (const Vector& result : run.results[0])
    for (int64_t i = 0; i < n; ++i) total[static_cast<size_t>(i)] += result[static_cast<size_t>(i)];
  double gap = 0, truth_l1 = 0;
  for (int64_t i = 0; i < n; ++i) {
    EXPECT_GT(total[static_cast<size_t>(i)], 0.0) << "coordinate " << i << " never sent in " << steps << " steps";
    gap += std::fabs(steps * truth.average[static_cast<size_t>(i)] - total[static_cast<size_t>(i)]);
    truth_l1 += steps * truth.average[static_cast<size_t>(i)];
  }
  EXPECT_LE(gap, (n / k - 1) * largest_l1 * (1 + 1e-5)) << "after " << steps << " steps";
  EXPECT_LT(gap / truth_l1, 0.01) << "relative l1 distance of the summed results from the truth";
  expect_same_on_every_rank(run);
}

INSTANTIATE_TEST_SUITE_P(Worlds, CommHookTopK, ::testing::Values(1, 2, 3, 4),
                         [](const auto& info) { return std::to_string(info.param) + "ranks"; });

class CommHookPowerSgd : public ::testing::TestWithParam<int> {};

// "Exact" for PowerSGD: float32 rounding in P = M Q and Gram-Schmidt, amplified by how nearly
// parallel P's columns are. With a warm-started Q and unrelated consecutive gradients (as below,
// unlike training, where consecutive gradients are alike) that factor reaches ~100: the worst
// error measured over 8 steps at 1–4 ranks was 2.3e-4 of the largest input. A rank-r
// approximation that missed a direction would be off by O(1).
constexpr double kPowerSgdExact = 1e-3;

// Gradients whose average has rank <= r: M_r = U B_rᵀ with U shared. One power iteration finds
// span(U), so approx = P Pᵀ avg(M) = avg(M) up to float error, at every step: the error feedback
// M_r - avg(M) keeps every rank's M in span(U), and averages to zero.
GradientFn low_rank(int64_t rows, int64_t cols, int64_t rank, int64_t plain) {
  return [=](int r, int step, int64_t numel) {
    Generator shared(42), own(static_cast<uint64_t>(100 * r + step + 7));
    Vector u(static_cast<size_t>(rows * rank)), b(static_cast<size_t>(cols * rank));
    for (float& x : u) x = shared.normal();
    for (float& x : b) x = own.normal();
    Vector g(static_cast<size_t>(numel));
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j)
        for (int64_t k = 0; k < rank; ++k)
          g[static_cast<size_t>(i * cols + j)] +=
              u[static_cast<size_t>(i * rank + k)] * b[static_cast<size_t>(j * rank + k)];
    for (int64_t i = 0; i < plain; ++i) g[static_cast<size_t>(rows * cols + i)] = own.normal();
    return g;
  };
}

double largest_magnitude(const Reference& ref) {
  double m = 0;
  for (double x : ref.mean_magnitude) m = std::max(m, x);
  return m;
}

TEST_P(CommHookPowerSgd, IsExactWhenTheAverageHasRankAtMostR) {
  int world = GetParam();
  CommHookOptions options;
  options.powersgd_rank = 3;
  options.powersgd_start_iter = 0;
  // A (40, 30) matrix of rank 2 (< r: P's third column holds only rounding noise) and a bias.
  GradientFn gradient = low_rank(40, 30, 2, 30);
  const int steps = 8;
  HookRun run = run_hook(world, "powersgd", options, {{{40, 30}, {30}}}, steps, gradient);
  for (int s = 0; s < steps; ++s) {
    Reference ref = reference(world, s, 1230, gradient);
    expect_close(run.results[0][static_cast<size_t>(s)], ref, 0, kPowerSgdExact * largest_magnitude(ref),
                 "step " + std::to_string(s));
  }
  expect_same_on_every_rank(run);
  EXPECT_EQ(run.bytes[0], steps * 4 * (3 * (40 + 30) + 30));
}

// A zero gradient zeroes every column of P and so of Q; the hook must redraw them, or the matrix
// would never be sent again.
TEST_P(CommHookPowerSgd, RecoversAfterAZeroGradient) {
  int world = GetParam();
  CommHookOptions options;
  options.powersgd_rank = 2;
  options.powersgd_start_iter = 0;
  GradientFn rank2 = low_rank(16, 12, 2, 0);
  GradientFn gradient = [&](int r, int step, int64_t numel) {
    return step == 0 ? Vector(static_cast<size_t>(numel), 0.0f) : rank2(r, step, numel);
  };
  HookRun run = run_hook(world, "powersgd", options, {{{16, 12}}}, 3, gradient);
  for (int s = 0; s < 3; ++s) {
    Reference ref = reference(world, s, 192, gradient);
    expect_close(run.results[0][static_cast<size_t>(s)], ref, 0, kPowerSgdExact * std::max(1.0, largest_magnitude(ref)),
                 "step " + std::to_string(s));
  }
}

TEST_P(CommHookPowerSgd, ApproximatesAFullRankGradientAndRemembersTheRest) {
  int world = GetParam();
  CommHookOptions options;
  options.powersgd_rank = 2;
  options.powersgd_start_iter = 1;
  // A constant full-rank gradient: with error feedback the sum of the results over T steps is
  // T·avg(g) minus the average leftover error, so it approaches the truth.
  GradientFn constant = [](int rank, int, int64_t numel) { return random_gradient(rank, 0, numel); };
  const int steps = 60;
  HookRun run = run_hook(world, "powersgd", options, {{{24, 16}}}, steps, constant);
  Reference truth = reference(world, 0, 384, constant);
  auto distance = [&](int upto) {  // relative l2 distance of the mean result over `upto` steps
    double d = 0, t = 0;
    for (size_t i = 0; i < 384; ++i) {
      double mean = 0;
      for (int s = 0; s < upto; ++s) mean += run.results[0][static_cast<size_t>(s)][i] / upto;
      d += (mean - truth.average[i]) * (mean - truth.average[i]);
      t += truth.average[i] * truth.average[i];
    }
    return std::sqrt(d / t);
  };
  double first_compressed = distance(2), all = distance(steps);
  EXPECT_LT(all, 0.1) << "after " << steps << " steps (two compressed steps: " << first_compressed << ")";
  EXPECT_LT(all, first_compressed);
  expect_same_on_every_rank(run);
}

TEST_P(CommHookPowerSgd, StartsFreshWhenTheBucketLayoutChanges) {
  int world = GetParam();
  CommHookOptions options;
  options.powersgd_rank = 2;
  options.powersgd_start_iter = 0;
  // The same hook, bucket 0 first holding a (20, 12) matrix, then (as after the reducer's rebuild)
  // a (12, 20) matrix and a bias: the old error and Q must not be applied to the new layout.
  GradientFn first = low_rank(20, 12, 1, 0), second = low_rank(12, 20, 1, 5);
  std::vector<Vector> results(static_cast<size_t>(world));
  testing::run_on_threads(
      world, threaded(world),
      [&](dist::ProcessGroup& group) {
        auto hook = make_comm_hook("powersgd", options);
        BucketView a = make_bucket(0, {{20, 12}}, world), b = make_bucket(0, {{12, 20}, {5}}, world);
        for (int s = 0; s < 2; ++s) {
          Vector g = first(group.rank(), s, 240);
          std::memcpy(a.flat.data<float>(), g.data(), g.size() * sizeof(float));
          hook->start(group, a);
          hook->finish(group, a);
        }
        Vector g = second(group.rank(), 0, 245);
        std::memcpy(b.flat.data<float>(), g.data(), g.size() * sizeof(float));
        hook->start(group, b);
        hook->finish(group, b);
        results[static_cast<size_t>(group.rank())].assign(b.flat.data<float>(), b.flat.data<float>() + 245);
      },
      short_timeout());
  Reference ref = reference(world, 0, 245, second);
  for (int r = 0; r < world; ++r)
    expect_close(results[static_cast<size_t>(r)], ref, 0, kPowerSgdExact * largest_magnitude(ref),
                 "rank " + std::to_string(r));
}

INSTANTIATE_TEST_SUITE_P(Worlds, CommHookPowerSgd, ::testing::Values(1, 2, 3, 4),
                         [](const auto& info) { return std::to_string(info.param) + "ranks"; });

// ---- configuration -----------------------------------------------------------------------------

TEST(CommHookFactory, NamesTheChoicesAndChecksTheOptions) {
  for (std::string name : {"none", "fp16", "bf16", "powersgd", "topk"}) EXPECT_EQ(make_comm_hook(name)->name(), name);
  try {
    make_comm_hook("fp8");
    ADD_FAILURE() << "expected a ValueError";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("none, fp16, bf16, powersgd or topk"), std::string::npos) << e.what();
  }
  CommHookOptions bad_ratio, bad_rank;
  bad_ratio.topk_ratio = 0;
  bad_rank.powersgd_rank = 0;
  EXPECT_THROW(make_comm_hook("topk", bad_ratio), ValueError);
  EXPECT_THROW(make_comm_hook("powersgd", bad_rank), ValueError);
  EXPECT_EQ(parallel::ddp::TopKHook(0.01).k_for(300), 3);  // not 4 from 0.01 · 300 rounding up
  EXPECT_EQ(parallel::ddp::TopKHook(0.01).k_for(1), 1);
}

}  // namespace
}  // namespace tessera
