// ZeroDataParallel against single-process training (ranks as threads over the threaded backend).
// With N ranks and per-rank batch B, every stage must equal one process training on the N·B global
// batch: the same initial parameters, the same samples, parameters within 1e-5 after 10 steps (the
// DDP tests' tolerance: the only difference is the order in which float32 gradients are summed).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>

#include "parallel/ddp/ddp_testing.h"
#include "tessera/core/cpu_allocator.h"
#include "tessera/nn/char_transformer.h"
#include "tessera/nn/models.h"
#include "tessera/ops/ops.h"
#include "tessera/parallel/zero/hybrid_groups.h"
#include "tessera/parallel/zero/sharded_checkpoint.h"
#include "tessera/parallel/zero/zero_data_parallel.h"
#include "testing/temp_dir.h"
#include "tessera/train/builders.h"

namespace tessera {
namespace {

using parallel::zero::FlatUnit;
using parallel::zero::Piece;
using parallel::zero::ZeroDataParallel;
using parallel::zero::ZeroOptions;
using testing::threaded;

using ModelFactory = std::function<std::shared_ptr<nn::Module>()>;

// ---- the layout ----

TEST(ZeroFlatUnit, PiecesTileEveryChunkOnceWithUnevenSizes) {
  // A parameter smaller than the world, sizes no world divides, an empty parameter.
  const std::vector<int64_t> sizes = {1, 7, 0, 13, 2};
  for (int world = 1; world <= 5; ++world) {
    auto units = parallel::zero::plan_units({{0, 1, 2}, {}, {3, 4}}, sizes, world);
    ASSERT_EQ(units.size(), 2u) << "the empty group makes no unit";
    for (const FlatUnit& unit : units) {
      EXPECT_EQ(unit.chunk, std::max<int64_t>(1, (unit.numel + world - 1) / world));
      std::vector<int> owner(static_cast<size_t>(unit.numel), 0);
      for (int r = 0; r < world; ++r)
        for (size_t k = 0; k < unit.params.size(); ++k) {
          Piece p = parallel::zero::piece_of(unit, k, r);
          ASSERT_GE(p.size(), 0);
          ASSERT_LE(p.chunk_offset + p.size(), unit.chunk);
          for (int64_t e = p.begin; e < p.end; ++e) {
            const int64_t flat = unit.offsets[k] + e;
            EXPECT_EQ(flat, r * unit.chunk + p.chunk_offset + (e - p.begin)) << "element where rank " << r << " holds it";
            ++owner[static_cast<size_t>(flat)];
          }
        }
      for (int o : owner) EXPECT_EQ(o, 1) << "world " << world;
    }
  }
}

// ---- training ----

struct Data {
  Tensor x, y;  // every step's global batch, stacked
};

Data make_data(int steps, int64_t global, const Shape& sample, int64_t classes, uint64_t seed, bool tokens = false) {
  Generator gen(seed);
  Shape xs = {steps, global};
  xs.insert(xs.end(), sample.begin(), sample.end());
  if (tokens) {
    Shape ys = {steps, global, sample[0]};
    return {randint(0, classes, xs, gen), randint(0, classes, ys, gen)};
  }
  return {randn(xs, gen), randint(0, classes, {steps, global}, gen)};
}

Tensor rows(const Tensor& t, int64_t step, int64_t begin, int64_t end) {
  return t.slice(0, step, step + 1).squeeze(0).slice(0, begin, end).contiguous();
}

Tensor loss_of(const Tensor& out, const Tensor& y) {
  if (out.dim() == 3) return cross_entropy(reshape(out, {-1, out.shape()[2]}), reshape(y, {-1}));
  return cross_entropy(out, y);
}

train::OptimizerConfig optimizer_config(const std::string& name) {
  train::OptimizerConfig o;
  o.name = name;
  o.lr = name == "sgd" ? 0.05 : name == "lars" ? 2.0 : 0.01;
  o.weight_decay = name == "sgd" ? 0.0 : 0.01;
  return o;
}

struct Recipe {
  ModelFactory make;
  Data data;
  int steps = 10;
  int accumulate = 1;
  std::string optimizer = "adam";
  double clip = 0.0;
};

std::shared_ptr<nn::Module> train_single(const Recipe& s) {
  manual_seed(7);
  auto model = s.make();
  auto opt = train::build_optimizer(optimizer_config(s.optimizer), optimizer_config(s.optimizer).lr, model->parameters());
  const int64_t global = s.data.x.shape()[1], micro = global / s.accumulate;
  for (int step = 0; step < s.steps; ++step) {
    opt->zero_grad();
    for (int m = 0; m < s.accumulate; ++m) {
      Tensor loss = loss_of((*model)(rows(s.data.x, step, m * micro, (m + 1) * micro)),
                            rows(s.data.y, step, m * micro, (m + 1) * micro));
      mul(loss, 1.0f / s.accumulate).backward();
    }
    if (s.clip > 0) optim::clip_grad_norm(model->parameters(), s.clip);
    opt->step();
  }
  return model;
}

// Each rank's whole model after training with ZeRO on `world` threads (gathered for stage 3); with
// `hybrid_shard` > 0, hybrid-sharded: replicas of that many ranks.
std::vector<nn::StateDict> train_zero(const Recipe& s, int world, ZeroOptions options, int hybrid_shard = 0) {
  std::vector<std::shared_ptr<nn::Module>> models;
  for (int r = 0; r < world; ++r) {
    manual_seed(r == 0 ? 7 : 100 + r);  // the others differ: the initial broadcast must matter
    models.push_back(s.make());
  }
  std::vector<nn::StateDict> out(static_cast<size_t>(world));
  const int64_t global = s.data.x.shape()[1], micro = global / s.accumulate, per_rank = micro / world;
  testing::run_on_threads(world, threaded(world), [&](dist::ProcessGroup& group) {
    const int r = group.rank();
    dist::ProcessGroupPtr shard = testing::borrow(group);
    ZeroOptions mine = options;
    if (hybrid_shard > 0) {
      const parallel::zero::HybridGroups hybrid = parallel::zero::make_hybrid_groups(shard, hybrid_shard);
      shard = hybrid.shard, mine.replicas = hybrid.replicas;
    }
    ZeroDataParallel zero(models[static_cast<size_t>(r)], shard, mine);
    auto opt = train::build_optimizer(optimizer_config(s.optimizer), optimizer_config(s.optimizer).lr,
                                      zero.parameters());
    zero.attach(*opt);
    for (int step = 0; step < s.steps; ++step) {
      for (int m = 0; m < s.accumulate; ++m) {
        const int64_t begin = m * micro + r * per_rank;
        Tensor loss = loss_of(zero(rows(s.data.x, step, begin, begin + per_rank)),
                              rows(s.data.y, step, begin, begin + per_rank));
        mul(loss, 1.0f / s.accumulate).backward();
      }
      if (s.clip > 0) zero.clip_grad_norm(s.clip);
      zero.step(*opt);
    }
    out[static_cast<size_t>(r)] = zero.full_state_dict();
  });
  return out;
}

double max_difference(const nn::Module& single, const nn::StateDict& state) {
  double worst = 0;
  auto params = single.named_parameters();
  for (const auto& [name, p] : params) {
    const Tensor* other = nullptr;
    for (const auto& [n, t] : state)
      if (n == name) other = &t;
    EXPECT_NE(other, nullptr) << name;
    if (other == nullptr) return 1e9;
    auto a = p.to_vector<float>(), b = other->to_vector<float>();
    for (size_t k = 0; k < a.size(); ++k) worst = std::max(worst, std::fabs(double(a[k]) - b[k]));
  }
  return worst;
}

// `world` replicas of one model, all from seed 7 (as train_single's), one per rank.
std::vector<std::shared_ptr<nn::Module>> replicas(const ModelFactory& make, int world) {
  std::vector<std::shared_ptr<nn::Module>> models;
  for (int r = 0; r < world; ++r) {
    manual_seed(7);
    models.push_back(make());
  }
  return models;
}

ModelFactory mlp() {
  return [] { return std::static_pointer_cast<nn::Module>(nn::make_mlp({20, 32, 16, 5})); };
}
ModelFactory cnn() {
  return [] { return std::static_pointer_cast<nn::Module>(nn::make_cnn(10)); };
}
ModelFactory gpt() {
  return [] {
    nn::CharTransformerConfig c;
    c.vocab_size = 11, c.context = 8, c.embed_dim = 16, c.heads = 2, c.layers = 2;
    return std::static_pointer_cast<nn::Module>(std::make_shared<nn::CharTransformer>(c));
  };
}

Recipe setup_for(const std::string& model, int accumulate) {
  Recipe s;
  s.accumulate = accumulate;
  const int64_t global = 12 * accumulate;  // 1, 2, 3 and 4 ranks divide it
  if (model == "cnn") {
    // The CNN is slow on two cores; 4 steps move every weight. SGD, as the DDP tests: Adam divides
    // by the root of tiny second moments, which turns float32 summation-order differences into
    // 1.5e-5 after 4 steps.
    s.make = cnn(), s.steps = 4, s.optimizer = "sgd";
    s.data = make_data(s.steps, global, {1, 28, 28}, 10, 3);
  } else if (model == "gpt") {
    s.make = gpt();
    s.data = make_data(s.steps, global, {8}, 11, 3, true);
  } else {
    s.make = mlp();
    s.data = make_data(s.steps, global, {20}, 5, 3);
  }
  return s;
}

struct Case {
  std::string model;
  int stage, world, accumulate;
};

class ZeroEqualsSingleProcess : public ::testing::TestWithParam<Case> {};

TEST_P(ZeroEqualsSingleProcess, ParametersAfterTraining) {
  const Case& c = GetParam();
  Recipe s = setup_for(c.model, c.accumulate);
  auto single = train_single(s);
  ZeroOptions options;
  options.stage = c.stage;
  options.bucket_cap_bytes = 1024;  // several units even for the small MLP
  auto states = train_zero(s, c.world, options);
  for (int r = 0; r < c.world; ++r)
    EXPECT_LT(max_difference(*single, states[static_cast<size_t>(r)]), 1e-5) << "rank " << r;
}

std::vector<Case> cases() {
  std::vector<Case> out;
  for (int stage = 1; stage <= 3; ++stage) {
    for (int world = 1; world <= 4; ++world) out.push_back({"mlp", stage, world, 1});
    out.push_back({"mlp", stage, 3, 2});
    out.push_back({"gpt", stage, 2, 1});
    out.push_back({"gpt", stage, 3, 2});
    out.push_back({"cnn", stage, 2, 1});
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Stages, ZeroEqualsSingleProcess, ::testing::ValuesIn(cases()), [](const auto& info) {
  const Case& c = info.param;
  return c.model + "_stage" + std::to_string(c.stage) + "_" + std::to_string(c.world) + "ranks_accumulate" +
         std::to_string(c.accumulate);
});

class ZeroOptimizers : public ::testing::TestWithParam<std::string> {};

TEST_P(ZeroOptimizers, EveryOptimizerAtStage3EqualsOneProcess) {
  // LARS and LAMB scale by whole-tensor norms that no rank holds alone (Optimizer::Partition).
  Recipe s = setup_for("mlp", 1);
  s.optimizer = GetParam();
  auto single = train_single(s);
  ZeroOptions options;
  options.stage = 3;
  auto states = train_zero(s, 3, options);
  for (int r = 0; r < 3; ++r) EXPECT_LT(max_difference(*single, states[static_cast<size_t>(r)]), 1e-5) << "rank " << r;
}

INSTANTIATE_TEST_SUITE_P(All, ZeroOptimizers, ::testing::Values("sgd", "adam", "adamw", "lars", "lamb"));

// Hybrid sharding (HSDP): ZeRO inside replicas of `shard` ranks, the gradient pieces all-reduced
// across the replicas: every rank ends with one process's parameters, whatever the cut (one replica
// is plain ZeRO, replicas of one rank are DDP), with clipping and LAMB's whole-tensor norms.
TEST(ZeroHybrid, ReplicasOfShardedRanksEqualOneProcess) {
  struct Cut {
    const char* model;
    int stage, world, shard;
  };
  for (const Cut& c : {Cut{"mlp", 2, 4, 2}, Cut{"mlp", 3, 4, 2}, Cut{"gpt", 3, 4, 2}, Cut{"mlp", 3, 6, 3},
                       Cut{"mlp", 3, 6, 2}, Cut{"mlp", 1, 4, 1}, Cut{"gpt", 2, 4, 4}}) {
    Recipe s = setup_for(c.model, 1);
    s.data = make_data(s.steps, 24, c.model == std::string("gpt") ? Shape{8} : Shape{20}, c.model == std::string("gpt") ? 11 : 5,
                       3, c.model == std::string("gpt"));  // 4 and 6 ranks divide 24
    s.clip = 0.05;
    auto single = train_single(s);
    ZeroOptions options;
    options.stage = c.stage;
    options.bucket_cap_bytes = 1024;
    auto states = train_zero(s, c.world, options, c.shard);
    for (int r = 0; r < c.world; ++r)
      EXPECT_LT(max_difference(*single, states[static_cast<size_t>(r)]), 1e-5)
          << c.model << " stage " << c.stage << ", " << c.world / c.shard << " replicas of " << c.shard << ", rank " << r;
  }
  Recipe s = setup_for("mlp", 1);
  s.data = make_data(s.steps, 24, {20}, 5, 3);
  s.optimizer = "lamb";
  auto single = train_single(s);
  auto states = train_zero(s, 4, ZeroOptions{.stage = 3}, 2);
  for (int r = 0; r < 4; ++r) EXPECT_LT(max_difference(*single, states[static_cast<size_t>(r)]), 1e-5) << "lamb, rank " << r;
}

TEST(ZeroHybrid, AShardSizeThatDoesNotDivideTheWorldIsRefused) {
  testing::run_on_threads(4, threaded(4), [&](dist::ProcessGroup& group) {
    EXPECT_THROW(parallel::zero::make_hybrid_groups(testing::borrow(group), 3), ValueError);
  });
}

TEST(Zero, ClippingUsesTheGlobalNormOverPieces) {
  Recipe s = setup_for("mlp", 1);
  s.clip = 0.05;  // below the MLP's gradient norm, so every step clips
  auto single = train_single(s);
  for (int stage : {2, 3}) {
    ZeroOptions options;
    options.stage = stage;
    auto states = train_zero(s, 3, options);
    EXPECT_LT(max_difference(*single, states[0]), 1e-5) << "stage " << stage;
  }
}

TEST(Zero, SizeWrapPolicyMergesLayersAndStillEqualsOneProcess) {
  Recipe s = setup_for("gpt", 1);
  auto single = train_single(s);
  ZeroOptions options;
  options.stage = 3;
  options.wrap_policy = "size";
  options.min_unit_bytes = 8 << 10;
  auto states = train_zero(s, 2, options);
  EXPECT_LT(max_difference(*single, states[1]), 1e-5);
}

// ---- state: whole checkpoints at any world size and stage ----

// Trains `first` steps with ZeRO (world_a, stage_a), saves the whole states (or a sharded directory), loads them into a job of
// (world_b, stage_b) that trains the remaining steps; returns rank 0's final model.
nn::StateDict train_and_resume(const Recipe& s, int first, int world_a, int stage_a, int world_b, int stage_b,
                               const std::string& sharded_dir = "") {
  nn::StateDict model_state, optimizer_state;
  for (int phase = 0; phase < 2; ++phase) {
    const int world = phase == 0 ? world_a : world_b;
    std::vector<std::shared_ptr<nn::Module>> models;
    for (int r = 0; r < world; ++r) {
      manual_seed(phase == 0 && r == 0 ? 7 : 100 + r);
      models.push_back(s.make());
    }
    const int64_t global = s.data.x.shape()[1], per_rank = global / world;
    nn::StateDict final_state;
    testing::run_on_threads(world, threaded(world), [&](dist::ProcessGroup& group) {
      const int r = group.rank();
      ZeroOptions options;
      options.stage = phase == 0 ? stage_a : stage_b;
      ZeroDataParallel zero(models[static_cast<size_t>(r)], testing::borrow(group), options);
      auto opt = train::build_optimizer(optimizer_config(s.optimizer), optimizer_config(s.optimizer).lr,
                                        zero.parameters());
      zero.attach(*opt);
      if (phase == 1 && sharded_dir.empty()) {
        zero.load_full_state_dict(model_state);
        zero.load_full_optimizer_state(*opt, optimizer_state);
      }
      if (phase == 1 && !sharded_dir.empty()) parallel::zero::load_sharded(zero, *opt, sharded_dir);
      for (int step = phase == 0 ? 0 : first; step < (phase == 0 ? first : s.steps); ++step) {
        Tensor loss = loss_of(zero(rows(s.data.x, step, r * per_rank, (r + 1) * per_rank)),
                              rows(s.data.y, step, r * per_rank, (r + 1) * per_rank));
        loss.backward();
        zero.step(*opt);
      }
      if (phase == 0 && !sharded_dir.empty()) parallel::zero::save_sharded(zero, *opt, sharded_dir);
      nn::StateDict m = zero.full_state_dict(), o = zero.full_optimizer_state(*opt);
      if (r == 0) {
        if (phase == 0) model_state = m, optimizer_state = o;
        else final_state = m;
      }
    });
    if (phase == 1) return final_state;
  }
  return {};
}

TEST(ZeroCheckpoint, WholeStateResumesAtEveryOtherWorldSizeAndStage) {
  Recipe s = setup_for("mlp", 1);
  s.steps = 6;
  auto single = train_single(s);
  for (int a = 1; a <= 4; ++a)
    for (int b = 1; b <= 4; ++b) {
      // Stage 1 <-> 3 on the diagonal's neighbours, stage 2 elsewhere: every pair of world sizes,
      // and both directions between the stages that differ most.
      const int stage_a = (a + b) % 2 == 0 ? 1 : 3, stage_b = (a + b) % 2 == 0 ? 3 : 1;
      nn::StateDict final_state = train_and_resume(s, 3, a, stage_a, b, stage_b);
      EXPECT_LT(max_difference(*single, final_state), 1e-5)
          << a << " ranks at stage " << stage_a << " -> " << b << " ranks at stage " << stage_b;
    }
}

TEST(ZeroCheckpoint, ShardedSaveResumesAtEveryOtherWorldSizeAndStage) {
  Recipe s = setup_for("mlp", 1);
  s.steps = 6;
  auto single = train_single(s);
  const std::string root = tessera::testing::fresh_dir("zero", "sharded");
  for (int a = 1; a <= 4; ++a)
    for (int b = 1; b <= 4; ++b) {
      const int stage_a = (a + b) % 2 == 0 ? 3 : 1, stage_b = (a + b) % 2 == 0 ? 1 : 3;
      const std::string dir = root + "/" + std::to_string(a) + "-" + std::to_string(b);
      nn::StateDict final_state = train_and_resume(s, 3, a, stage_a, b, stage_b, dir);
      EXPECT_LT(max_difference(*single, final_state), 1e-5)
          << a << " ranks at stage " << stage_a << " -> " << b << " ranks at stage " << stage_b;
    }
}

TEST(ZeroCheckpoint, ConsolidatedShardsEqualTheWholeStateAndBadDirectoriesAreRefused) {
  Recipe s = setup_for("mlp", 1);
  const std::string dir = tessera::testing::fresh_dir("zero", "consolidate") + "/shards";
  nn::StateDict whole_model, whole_optimizer;
  auto models = replicas(s.make, 3);
  testing::run_on_threads(3, threaded(3), [&](dist::ProcessGroup& group) {
    const int r = group.rank();
    ZeroDataParallel zero(models[static_cast<size_t>(r)], testing::borrow(group), {.stage = 3});
    auto opt = train::build_optimizer(optimizer_config("adam"), 0.01, zero.parameters());
    for (int step = 0; step < 2; ++step) {
      loss_of(zero(rows(s.data.x, step, r * 4, r * 4 + 4)), rows(s.data.y, step, r * 4, r * 4 + 4)).backward();
      zero.step(*opt);
    }
    parallel::zero::save_sharded(zero, *opt, dir);
    nn::StateDict m = zero.full_state_dict(), o = zero.full_optimizer_state(*opt);
    if (r == 0) whole_model = m, whole_optimizer = o;
  });
  io::PieceReader reader(dir);
  auto [model, optimizer] = io::read_whole_state(reader);
  // Bit for bit, tensor by tensor, whatever the order the ranks listed them in.
  auto same = [](const nn::StateDict& read, const nn::StateDict& whole) {
    ASSERT_EQ(read.size(), whole.size());
    std::map<std::string, Tensor> by_name(read.begin(), read.end());
    for (const auto& [name, t] : whole) {
      ASSERT_TRUE(by_name.count(name)) << name;
      const Tensor& r = by_name.at(name);
      ASSERT_EQ(r.shape(), t.shape()) << name;
      ASSERT_EQ(r.dtype(), t.dtype()) << name;
      const Tensor c = t.contiguous();
      EXPECT_EQ(std::memcmp(r.raw_data(), c.raw_data(), static_cast<size_t>(t.numel()) * dtype_size(t.dtype())), 0) << name;
    }
  };
  same(model, whole_model);
  same(optimizer, whole_optimizer);
  // An interrupted save (no manifest) and a rank's file copied into another's place are refused by name.
  const std::string manifest = dir + "/manifest.json", moved = dir + "/manifest.json.moved";
  std::filesystem::rename(manifest, moved);
  EXPECT_THROW(io::PieceReader{dir}, IoError);
  std::filesystem::rename(moved, manifest);
  std::filesystem::copy_file(dir + "/rank-0-of-3.safetensors", dir + "/rank-1-of-3.safetensors",
                             std::filesystem::copy_options::overwrite_existing);
  try {
    io::PieceReader copied(dir);
    io::read_whole_state(copied);
    ADD_FAILURE() << "a piece file of the wrong rank was accepted";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("rank-1-of-3"), std::string::npos) << e.what();
  }
}

TEST(ZeroCheckpoint, OptimizerStateHasTheSingleProcessNamesAndShapes) {
  Recipe s = setup_for("mlp", 1);
  s.steps = 2;
  manual_seed(7);
  auto model = s.make();
  auto opt = train::build_optimizer(optimizer_config("adam"), 0.01, model->parameters());
  for (int step = 0; step < 2; ++step) {
    opt->zero_grad();
    loss_of((*model)(rows(s.data.x, step, 0, 12)), rows(s.data.y, step, 0, 12)).backward();
    opt->step();
  }
  const nn::StateDict expected = opt->state_dict();
  nn::StateDict got;
  auto models = replicas(s.make, 3);
  testing::run_on_threads(3, threaded(3), [&](dist::ProcessGroup& group) {
    const int r = group.rank();
    ZeroOptions options;
    options.stage = 2;
    ZeroDataParallel zero(models[static_cast<size_t>(r)], testing::borrow(group), options);
    auto o = train::build_optimizer(optimizer_config("adam"), 0.01, zero.parameters());
    for (int step = 0; step < 2; ++step) {
      loss_of(zero(rows(s.data.x, step, r * 4, r * 4 + 4)), rows(s.data.y, step, r * 4, r * 4 + 4)).backward();
      zero.step(*o);
    }
    nn::StateDict state = zero.full_optimizer_state(*o);
    if (r == 0) got = state;
  });
  ASSERT_EQ(got.size(), expected.size());
  for (size_t k = 0; k < got.size(); ++k) {
    EXPECT_EQ(got[k].first, expected[k].first);
    EXPECT_EQ(got[k].second.shape(), expected[k].second.shape()) << got[k].first;
  }
}

// ---- memory ----

TEST(ZeroMemory, Stage3StatePerRankIsSixteenPsiOverN) {
  // Ψ parameters with Adam: pieces of the values (4Ψ/N), of the gradients (4Ψ/N) and of Adam's two
  // moments (8Ψ/N) between steps. The stated overhead: each unit pads its chunk to a multiple of N,
  // at most N - 1 elements (4(N-1) bytes) per unit for values and gradients.
  for (int world : {1, 2, 4}) {
    auto models = replicas([] { return std::static_pointer_cast<nn::Module>(nn::make_mlp({784, 512, 256, 10})); }, world);
    const int64_t psi = models[0]->num_parameters();
    Data data = make_data(1, 4 * world, {784}, 10, 1);
    testing::run_on_threads(world, threaded(world), [&](dist::ProcessGroup& group) {
      const int r = group.rank();
      ZeroOptions options;
      options.stage = 3;
      ZeroDataParallel zero(models[static_cast<size_t>(r)], testing::borrow(group), options);
      auto opt = train::build_optimizer(optimizer_config("adam"), 0.01, zero.parameters());
      loss_of(zero(rows(data.x, 0, r * 4, r * 4 + 4)), rows(data.y, 0, r * 4, r * 4 + 4)).backward();
      zero.step(*opt);
      const auto m = zero.memory(opt.get());
      const int64_t units = static_cast<int64_t>(zero.units().size());
      const double expected = 16.0 * static_cast<double>(psi) / world;
      const double overhead = 2.0 * 4 * (world - 1) * units;
      EXPECT_GE(static_cast<double>(m.total()), expected * 0.999) << "rank " << r << " of " << world;
      EXPECT_LE(static_cast<double>(m.total()), expected + overhead + 8.0 * (world - 1) * units) << "rank " << r;
      int64_t piece_elements = 0;
      for (const Tensor& p : zero.parameters()) piece_elements += p.numel();
      EXPECT_EQ(m.optimizer_state, 8 * piece_elements) << "Adam: two moments per owned element";
    });
  }
}

TEST(ZeroMemory, Stage3FreesEveryGatheredUnitBetweenSteps) {
  auto models = replicas(gpt(), 2);
  Data data = make_data(1, 4, {8}, 11, 1, true);
  testing::run_on_threads(2, threaded(2), [&](dist::ProcessGroup& group) {
    const int r = group.rank();
    ZeroOptions options;
    options.stage = 3;
    ZeroDataParallel zero(models[static_cast<size_t>(r)], testing::borrow(group), options);
    auto opt = train::build_optimizer(optimizer_config("adam"), 0.01, zero.parameters());
    EXPECT_GE(zero.units().size(), 4u) << "embedding, two blocks and the head";
    loss_of(zero(rows(data.x, 0, r * 2, r * 2 + 2)), rows(data.y, 0, r * 2, r * 2 + 2)).backward();
    zero.step(*opt);
    int64_t pieces = 0, chunks = 0;
    for (const Tensor& p : zero.parameters()) pieces += p.numel();
    for (const auto& u : zero.units()) chunks += u.chunk;
    EXPECT_EQ(zero.memory(opt.get()).parameters, 4 * chunks) << "only this rank's chunks stay";
    EXPECT_LE(pieces, chunks);
  });
}

// ---- misuse ----

TEST(Zero, AParameterWithoutAGradientIsNamed) {
  auto models = replicas([] { return std::static_pointer_cast<nn::Module>(nn::make_mlp({4, 3, 2})); }, 2);
  testing::run_on_threads(2, threaded(2), [&](dist::ProcessGroup& group) {
    const int r = group.rank();
    ZeroOptions options;
    options.stage = 2;
    ZeroDataParallel zero(models[static_cast<size_t>(r)], testing::borrow(group), options);
    // Only the first layer's weight takes part: its bias and the second layer get no gradient.
    auto first = zero.module().named_parameters()[0].second;
    try {
      sum(matmul(randn({2, 3}), first)).backward();
      ADD_FAILURE() << "backward without every parameter's gradient went through";
    } catch (const ValueError& e) {
      EXPECT_NE(std::string(e.what()).find("received no gradient"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("0.bias"), std::string::npos) << e.what();
    }
  });
}

TEST(Zero, BadOptionsAreRefused) {
  auto model = nn::make_mlp({4, 2});
  testing::run_on_threads(1, threaded(1), [&](dist::ProcessGroup& group) {
    ZeroOptions options;
    options.stage = 4;
    EXPECT_THROW(ZeroDataParallel(model, testing::borrow(group), options), ValueError);
    options.stage = 3;
    options.wrap_policy = "block";
    EXPECT_THROW(ZeroDataParallel(model, testing::borrow(group), options), ValueError);
  });
}

}  // namespace
}  // namespace tessera
