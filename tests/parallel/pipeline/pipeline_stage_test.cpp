// A pipeline of P stages (ranks as threads) accumulates exactly the gradients of one process running
// the whole model on the whole batch, for GPipe, 1F1B, interleaved 1F1B (v chunks per stage), ZB-H1
// (weight gradients deferred to W passes) and ZB-V (two chunks per stage in a V), and any number of
// micro-batches; ZB-V's gradients are 1F1B's bit for bit.
#include <gtest/gtest.h>

#include <map>
#include <mutex>

#include "parallel/threaded_group.h"
#include "tessera/nn/char_transformer.h"
#include "tessera/ops/ops.h"
#include "tessera/parallel/pipeline/partition.h"
#include "tessera/parallel/pipeline/pipeline_stage.h"
#include "testing/expect.h"

namespace tessera::parallel::pipeline {
namespace {

using testing::borrow;
using testing::threaded;

std::shared_ptr<nn::Sequential> make_mlp() {
  return std::make_shared<nn::Sequential>(std::initializer_list<nn::ModulePtr>{
      std::make_shared<nn::Linear>(6, 16), std::make_shared<nn::GELU>(), std::make_shared<nn::Linear>(16, 16),
      std::make_shared<nn::GELU>(), std::make_shared<nn::Linear>(16, 12), std::make_shared<nn::GELU>(),
      std::make_shared<nn::Linear>(12, 3)});
}

std::shared_ptr<nn::CharTransformer> make_gpt() {
  nn::CharTransformerConfig c;
  c.vocab_size = 11;
  c.embed_dim = 16;
  c.heads = 2;
  c.layers = 3;
  c.context = 6;
  return std::make_shared<nn::CharTransformer>(c);
}

nn::LayerChain chain_of(nn::Module& m) {
  if (auto* t = dynamic_cast<nn::CharTransformer*>(&m)) return t->layer_chain();
  return dynamic_cast<nn::Sequential&>(m).layer_chain();
}

Tensor mean_cross_entropy(const Tensor& out, const Tensor& targets) {
  if (out.dim() == 3) return cross_entropy(reshape(out, {-1, out.shape()[2]}), reshape(targets, {-1}));
  return cross_entropy(out, targets);
}

struct Case {
  bool gpt;
  int stages;
  int64_t microbatches;
  ScheduleKind schedule;
  int chunks = 1;
};

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  const char* names[] = {"GPipe", "OneFOneB", "Interleaved", "ZeroBubbleH1", "ZeroBubbleV"};
  // Appended piece by piece: GCC 12 reports its own std::string operator+ here (-Wstringop-overflow,
  // a false positive).
  std::string name = c.gpt ? "Gpt" : "Mlp";
  name += 'P';
  name += std::to_string(c.stages);
  name += 'M';
  name += std::to_string(c.microbatches);
  name += names[static_cast<int>(c.schedule)];
  if (c.chunks > 1) {
    name += 'V';
    name += std::to_string(c.chunks);
  }
  return name;
}

// The batch every case trains on: 24 samples, which divide by every micro-batch count below.
struct Batch {
  Tensor inputs, targets;
};
Batch make_batch(bool gpt) {
  Generator gen(7);
  const int64_t batch = 24;
  Tensor inputs = gpt ? randint(0, 11, {batch, 6}, gen) : randn({batch, 6}, gen);
  return {inputs, gpt ? randint(0, 11, {batch, 6}, gen) : randint(0, 3, {batch}, gen)};
}

struct PipelineRun {
  std::map<std::string, Tensor> grads;
  std::vector<StepStats> stats;
};

// One step of the case's pipeline (ranks as threads) on copies of `model`.
PipelineRun run_pipeline(const Case& c, nn::Module& model, const Batch& batch) {
  // One copy of the model per rank, built here: the default generator is not for concurrent use.
  std::vector<std::shared_ptr<nn::Module>> copies;
  for (int r = 0; r < c.stages; ++r) {
    copies.push_back(c.gpt ? std::shared_ptr<nn::Module>(make_gpt()) : make_mlp());
    copies.back()->load_state_dict(model.state_dict());
  }
  std::mutex mu;
  PipelineRun run;
  run.stats.resize(c.stages);
  testing::run_on_threads(c.stages, threaded(c.stages), [&](dist::ProcessGroup& group) {
    const int r = group.rank();
    nn::LayerChain chain = chain_of(*copies[r]);
    auto bounds = balance_stages(parameter_costs(chain), c.stages * c.chunks);
    PipelineStage stage(stage_chunks(chain, bounds, r, c.stages, chunk_order(c.schedule)), borrow(group),
                        {c.schedule, c.microbatches}, mean_cross_entropy);
    EXPECT_EQ(stage.holds_output(), r == output_stage(c.schedule, c.stages));
    run.stats[r] = stage.train_step(stage.holds_input() ? batch.inputs : Tensor(),
                                    stage.holds_output() ? batch.targets : Tensor());
    std::lock_guard lock(mu);
    for (auto& [name, t] : stage.state_dict())
      if (t.requires_grad()) run.grads[name] = t.grad();
  });
  return run;
}

class PipelineEquivalence : public ::testing::TestWithParam<Case> {};

TEST_P(PipelineEquivalence, GradientsAndLossEqualOneProcess) {
  const Case c = GetParam();
  const Batch batch = make_batch(c.gpt);
  manual_seed(3);
  std::shared_ptr<nn::Module> reference = c.gpt ? std::shared_ptr<nn::Module>(make_gpt()) : make_mlp();
  Tensor ref_loss = mean_cross_entropy(reference->forward(batch.inputs), batch.targets);
  ref_loss.backward();
  std::map<std::string, Tensor> ref_grads;
  for (auto& [name, p] : reference->named_parameters()) ref_grads[name] = p.grad();
  PipelineRun run = run_pipeline(c, *reference, batch);
  std::map<std::string, Tensor>& grads = run.grads;
  std::vector<StepStats>& stats = run.stats;
  ASSERT_EQ(grads.size(), ref_grads.size());
  for (auto& [name, g] : ref_grads) {
    ASSERT_TRUE(grads[name].defined()) << name;
    testing::expect_near(grads[name], g.to_vector<float>(), 2e-5f);
  }
  for (int r = 0; r < c.stages; ++r) {
    EXPECT_NEAR(stats[r].loss, ref_loss.item<float>(), 1e-5) << "stage " << r;
    const int64_t want_peak = peak_in_flight(make_schedule(c.schedule, r, c.stages, c.microbatches, c.chunks));
    if (c.schedule == ScheduleKind::GPipe) {
      EXPECT_EQ(want_peak, c.microbatches);
    }
    if (c.schedule != ScheduleKind::GPipe && c.chunks == 1) {
      EXPECT_EQ(want_peak, std::min<int64_t>(c.stages - r, c.microbatches));
    }
    EXPECT_EQ(stats[r].peak_activations, want_peak) << "stage " << r;
    EXPECT_GE(stats[r].compute_seconds, 0.0);
    EXPECT_LE(stats[r].compute_seconds, stats[r].wall_seconds);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, PipelineEquivalence,
    ::testing::Values(Case{false, 1, 4, ScheduleKind::OneForwardOneBackward}, Case{false, 2, 1, ScheduleKind::GPipe},
                      Case{false, 2, 4, ScheduleKind::GPipe}, Case{false, 2, 4, ScheduleKind::OneForwardOneBackward},
                      Case{false, 3, 8, ScheduleKind::OneForwardOneBackward}, Case{false, 4, 2, ScheduleKind::GPipe},
                      Case{true, 2, 2, ScheduleKind::GPipe}, Case{true, 2, 4, ScheduleKind::OneForwardOneBackward},
                      Case{true, 3, 4, ScheduleKind::OneForwardOneBackward},
                      Case{false, 2, 4, ScheduleKind::Interleaved, 2}, Case{false, 3, 6, ScheduleKind::Interleaved, 2},
                      Case{false, 2, 8, ScheduleKind::Interleaved, 3}, Case{true, 2, 4, ScheduleKind::Interleaved, 2},
                      Case{false, 1, 4, ScheduleKind::ZeroBubbleH1}, Case{false, 2, 4, ScheduleKind::ZeroBubbleH1},
                      Case{false, 3, 8, ScheduleKind::ZeroBubbleH1}, Case{false, 4, 2, ScheduleKind::ZeroBubbleH1},
                      Case{true, 2, 4, ScheduleKind::ZeroBubbleH1}, Case{true, 3, 4, ScheduleKind::ZeroBubbleH1},
                      Case{false, 2, 1, ScheduleKind::ZeroBubbleV, 2}, Case{false, 2, 4, ScheduleKind::ZeroBubbleV, 2},
                      Case{false, 3, 8, ScheduleKind::ZeroBubbleV, 2}, Case{false, 3, 2, ScheduleKind::ZeroBubbleV, 2},
                      Case{true, 2, 4, ScheduleKind::ZeroBubbleV, 2}, Case{true, 2, 8, ScheduleKind::ZeroBubbleV, 2}),
    case_name);

// ZB-V cuts the model into 2P chunks instead of P and runs B, W and the chunks in another order,
// but each parameter's gradient sums its micro-batches in the same order, from the same products:
// the gradients and the loss are 1F1B's bit for bit.
TEST(PipelineStageZeroBubbleV, GradientsAndLossAreOneFOneBsBitForBit) {
  for (bool gpt : {false, true})
    for (int stages : {2, 3}) {
      if (gpt && stages == 3) continue;  // the small GPT's chain has 5 layers, fewer than 2·3 chunks
      const Batch batch = make_batch(gpt);
      manual_seed(5);
      std::shared_ptr<nn::Module> model = gpt ? std::shared_ptr<nn::Module>(make_gpt()) : make_mlp();
      const PipelineRun one_f_one_b = run_pipeline({gpt, stages, 4, ScheduleKind::OneForwardOneBackward}, *model, batch);
      const PipelineRun v = run_pipeline({gpt, stages, 4, ScheduleKind::ZeroBubbleV, 2}, *model, batch);
      ASSERT_EQ(v.grads.size(), one_f_one_b.grads.size());
      for (const auto& [name, g] : one_f_one_b.grads)
        EXPECT_EQ(v.grads.at(name).to_vector<float>(), g.to_vector<float>()) << name << " P=" << stages;
      EXPECT_EQ(v.stats[0].loss, one_f_one_b.stats[0].loss);
      // Every stage holds at most 2P chunks' activations: P stages' worth, 1F1B's stage 0's.
      for (int r = 0; r < stages; ++r) EXPECT_LE(v.stats[r].peak_activations, 2 * one_f_one_b.stats[0].peak_activations);
    }
}

// ZB-H1 plans its order again after each of its first steps, from the passes every stage measured
// (all-gathered). Whatever order the measured speeds give, B and W run in micro-batch order, so every
// step's gradients and loss are the first step's bit for bit, and every stage holds at most one
// more micro-batch waiting for W than the unit-time plan lets it.
TEST(PipelineStageZeroBubble, PlanningFromMeasuredPassesKeepsTheGradientsBits) {
  for (int stages : {2, 3}) {
    Generator gen(5);
    const int64_t batch = 24, microbatches = 8;
    Tensor inputs = randn({batch, 6}, gen);
    Tensor targets = randint(0, 3, {batch}, gen);
    manual_seed(3);
    auto reference = make_mlp();
    std::vector<std::shared_ptr<nn::Sequential>> copies;
    for (int r = 0; r < stages; ++r) {
      copies.push_back(make_mlp());
      copies.back()->load_state_dict(reference->state_dict());
    }
    constexpr int kSteps = PipelineStage::kPlanningSteps + 1;
    std::vector<std::vector<std::vector<float>>> grads(stages);  // [stage][step]: the stage's gradients concatenated
    std::vector<std::vector<float>> losses(stages);
    std::vector<std::vector<Action>> planned(stages);
    testing::run_on_threads(stages, threaded(stages), [&](dist::ProcessGroup& group) {
      const int r = group.rank();
      nn::LayerChain chain = chain_of(*copies[r]);
      auto bounds = balance_stages(parameter_costs(chain), stages);
      PipelineStage stage(stage_chunks(chain, bounds, r, stages), borrow(group),
                          {ScheduleKind::ZeroBubbleH1, microbatches}, mean_cross_entropy);
      for (int step = 0; step < kSteps; ++step) {
        nn::zero_grad(stage.parameters());
        losses[r].push_back(
            static_cast<float>(stage.train_step(r == 0 ? inputs : Tensor(), r == stages - 1 ? targets : Tensor()).loss));
        std::vector<float> all;
        for (auto& p : stage.parameters()) {
          auto g = p.grad().to_vector<float>();
          all.insert(all.end(), g.begin(), g.end());
        }
        grads[r].push_back(std::move(all));
      }
      planned[r] = stage.schedule();
      EXPECT_EQ(stage.plans_made(), PipelineStage::kPlanningSteps) << "stage " << r;
    });
    for (int r = 0; r < stages; ++r) {
      for (int step = 1; step < kSteps; ++step) {
        EXPECT_EQ(grads[r][step], grads[r][0]) << "P=" << stages << " stage " << r << " step " << step;
        EXPECT_EQ(losses[r][step], losses[r][0]) << "P=" << stages << " stage " << r << " step " << step;
      }
      ASSERT_EQ(planned[r].size(), static_cast<size_t>(3 * microbatches));
      int64_t holding = 0, most = 0;
      for (const Action& a : planned[r]) {
        holding += a.kind == Action::Kind::Forward ? 1 : a.kind == Action::Kind::Weight ? -1 : 0;
        most = std::max(most, holding);
      }
      EXPECT_LE(most, 2 * stages - r) << "P=" << stages << " stage " << r;
    }
  }
}

// The same with an order chosen here: pass times under which the plan differs from the unit-time
// order (W shorter than B, the middle stage slower). The step's gradients and loss are the
// unit-time order's bit for bit, and each stage runs the order planned from those times.
TEST(PipelineStageZeroBubble, AnOrderPlannedFromGivenTimesGivesTheUnitOrdersBits) {
  const int stages = 3;
  const int64_t batch = 24, microbatches = 8;
  const std::vector<PassTimes> times{{1.0, 1.4, 0.6}, {1.3, 1.8, 0.7}, {1.0, 1.4, 0.6}};
  Generator gen(6);
  Tensor inputs = randn({batch, 6}, gen);
  Tensor targets = randint(0, 3, {batch}, gen);
  manual_seed(4);
  auto reference = make_mlp();
  std::vector<std::vector<float>> unit_grads(stages), planned_grads(stages);
  std::vector<float> unit_loss(stages), planned_loss(stages);
  for (bool plan : {false, true}) {
    std::vector<std::shared_ptr<nn::Sequential>> copies;
    for (int r = 0; r < stages; ++r) {
      copies.push_back(make_mlp());
      copies.back()->load_state_dict(reference->state_dict());
    }
    testing::run_on_threads(stages, threaded(stages), [&](dist::ProcessGroup& group) {
      const int r = group.rank();
      nn::LayerChain chain = chain_of(*copies[r]);
      PipelineStage stage(stage_chunks(chain, balance_stages(parameter_costs(chain), stages), r, stages), borrow(group),
                          {ScheduleKind::ZeroBubbleH1, microbatches}, mean_cross_entropy);
      const auto unit = stage.schedule();
      if (plan) {
        stage.plan_from(times);
        EXPECT_EQ(stage.schedule(), make_schedule(ScheduleKind::ZeroBubbleH1, r, stages, microbatches, 1, times));
        if (r == 0) {
          EXPECT_NE(stage.schedule(), unit) << "these times should move stage 0's passes";
        }
      }
      const float loss =
          static_cast<float>(stage.train_step(r == 0 ? inputs : Tensor(), r == stages - 1 ? targets : Tensor()).loss);
      std::vector<float> all;
      for (auto& p : stage.parameters()) {
        auto g = p.grad().to_vector<float>();
        all.insert(all.end(), g.begin(), g.end());
      }
      (plan ? planned_grads : unit_grads)[r] = std::move(all);
      (plan ? planned_loss : unit_loss)[r] = loss;
    });
  }
  for (int r = 0; r < stages; ++r) {
    EXPECT_EQ(planned_grads[r], unit_grads[r]) << "stage " << r;
    EXPECT_EQ(planned_loss[r], unit_loss[r]) << "stage " << r;
  }
}

TEST(PipelineStageErrors, AMissingActivationTimesOutNamingStageAndMicrobatch) {
  dist::ProcessGroupOptions short_timeout;
  short_timeout.timeout = std::chrono::milliseconds(300);
  manual_seed(1);
  auto model = make_mlp();
  auto chain = model->layer_chain();
  testing::run_on_threads(2, threaded(2), [&](dist::ProcessGroup& group) {
    if (group.rank() == 0) return;  // stage 0 never runs its step
    PipelineStage stage({chain.back()}, borrow(group), {ScheduleKind::GPipe, 2}, mean_cross_entropy);
    testing::expect_error<TimeoutError>([&] { stage.train_step(Tensor(), from_vector(std::vector<int64_t>{0, 1}, {2})); },
                                        {"stage 1", "micro-batch 0", "from stage 0"});
  }, short_timeout);
}

TEST(PipelineStageErrors, AnIndivisibleBatchIsRejected) {
  manual_seed(1);
  auto model = make_mlp();
  testing::run_on_threads(1, threaded(1), [&](dist::ProcessGroup& group) {
    PipelineStage stage(model->layer_chain(), borrow(group), {ScheduleKind::GPipe, 3}, mean_cross_entropy);
    Generator gen(1);
    testing::expect_error<ValueError>([&] { stage.train_step(randn({8, 6}, gen), randint(0, 3, {8}, gen)); },
                                      {"8 samples", "3 equal micro-batches"});
  });
}

// The no-grad pass through `stages` stages of `chunks` chunks each equals the whole model's forward,
// and only the output stage returns it.
void expect_evaluation_equals_the_model(int stages, int chunks, ScheduleKind schedule, uint64_t seed) {
  manual_seed(seed);
  auto reference = make_mlp();
  Generator gen(seed - 3);
  Tensor x = randn({5, 6}, gen);
  Tensor want = reference->forward(x);
  std::vector<std::shared_ptr<nn::Sequential>> copies;
  for (int r = 0; r < stages; ++r) {
    copies.push_back(make_mlp());
    copies.back()->load_state_dict(reference->state_dict());
  }
  Tensor got;
  testing::run_on_threads(stages, threaded(stages), [&](dist::ProcessGroup& group) {
    const int r = group.rank();
    auto chain = copies[r]->layer_chain();
    auto bounds = balance_stages(parameter_costs(chain), stages * chunks);
    // M = P: the interleaved order needs a multiple of the stages (forward itself runs one micro-batch).
    PipelineStage stage(stage_chunks(chain, bounds, r, stages, chunk_order(schedule)), borrow(group),
                        {schedule, stages}, mean_cross_entropy);
    EXPECT_EQ(stage.chunks(), chunks);
    Tensor out = stage.forward(r == 0 ? x : Tensor());
    if (r == output_stage(schedule, stages)) got = out;
    else EXPECT_FALSE(out.defined());
  });
  testing::expect_near(got, want.to_vector<float>(), 1e-6f);
}

TEST(PipelineStageForward, EvaluationPassesThroughEveryStage) {
  expect_evaluation_equals_the_model(3, 1, ScheduleKind::GPipe, 5);
}

TEST(PipelineStageForward, EvaluationGoesRoundTheRingThroughEveryChunk) {
  expect_evaluation_equals_the_model(2, 3, ScheduleKind::Interleaved, 6);
}

TEST(PipelineStageForward, EvaluationGoesDownAndBackUpTheV) {
  expect_evaluation_equals_the_model(3, 2, ScheduleKind::ZeroBubbleV, 7);
}

}  // namespace
}  // namespace tessera::parallel::pipeline
