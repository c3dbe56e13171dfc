// Live membership in the trainer (dist/live_membership.h is the protocol): when a collective fails
// on a lost peer, the survivors meet in the store, build a process group of those present, and take
// the state of the member that got furthest; at a step boundary rank 0 admits processes waiting to
// join, and the members meet the same way. Nobody restarts.
//
// What a failure costs: the step in flight when the peer was lost is redone over the new members.
// DDP updates a replica only after every bucket's all-reduce has completed, and an all-reduce
// completes only with every rank's gradient in it, so a survivor either holds step s (it did not
// finish step s+1) or holds step s+1 whole (its all-reduces completed before the loss; it failed in
// the step boundary's collective). The member with the highest step is the source, every other
// member takes its parameters, optimizer state, position and random state, and the job goes on from
// there: no step that any survivor completed is lost. The redone step reads the same samples
// (train.global_batch_size fixes the global batch; the new members split it), so the run follows an
// undisturbed one, up to the order of floating-point sums.
//
// ZeRO stages 1 and 2 cut the optimizer state over the ranks, so a lost rank's pieces are found on
// its neighbour (parallel/zero/shard_buddies.h keeps them after every step), and the members rebuild
// the state of the lowest step among them (at most one step behind the furthest: that step is
// redone). The member that rebuilds it receives every old rank's pieces from whoever holds them and
// sends the whole state as DDP's source does; the new strategy cuts it again at the new world size.
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "tessera/dist/heartbeat.h"
#include "tessera/dist/launcher/env.h"
#include "tessera/dist/store/store_from_env.h"
#include "tessera/io/checkpoint_keys.h"
#include "tessera/io/safetensors.h"
#include "tessera/ops/ops.h"
#include "tessera/parallel/zero/shard_buddies.h"
#include "tessera/train/model_registry.h"
#include "tessera/train/trainer.h"
#include "tessera/util/settings.h"

namespace tessera::train {

using dist::Milliseconds;
using tessera::detail::concat;

namespace {

dist::LiveOptions live_options(const TrainConfig& config) {
  dist::LiveOptions o;
  o.settle = Milliseconds(config.distributed.live_settle_ms);
  o.timeout = collective_timeout(config);
  o.round_timeout = std::min(o.timeout, Milliseconds(30000));
  return o;
}

Milliseconds heartbeat_interval() { return Milliseconds(env_int(dist::launcher::kHeartbeatMsVariable, 0)); }

// What a member's state travels as: the two files of a checkpoint, in memory, one after the other.
std::string pack(const std::string& model, const std::string& trainer) {
  std::string out(sizeof(int64_t), '\0');
  const int64_t n = static_cast<int64_t>(model.size());
  std::memcpy(out.data(), &n, sizeof n);
  return out + model + trainer;
}

std::pair<std::string_view, std::string_view> unpack(std::string_view bytes) {
  int64_t n = -1;
  TESSERA_CHECK(bytes.size() >= sizeof n, "[live membership] a member's state is truncated");
  std::memcpy(&n, bytes.data(), sizeof n);
  TESSERA_CHECK(n >= 0 && static_cast<size_t>(n) <= bytes.size() - sizeof n, "[live membership] a member's state is malformed");
  return {bytes.substr(sizeof n, static_cast<size_t>(n)), bytes.substr(sizeof n + static_cast<size_t>(n))};
}

}  // namespace

bool Trainer::wants_live_membership() const {
  const std::string& mode = config_.distributed.live_membership;
  if (mode == "off" || !dist::launcher::has_worker_rank()) return false;
  if (mode == "auto" && !under_the_elastic_agent()) return false;
  const std::string& backend = config_.distributed.backend;
  const int64_t global = config_.train.global_batch_size;
  bool every_size_divides = global > 0;
  for (int64_t w = 1; every_size_divides && w <= world_size(); ++w) every_size_divides = global % w == 0;
  std::string cannot;
  const bool plain_ddp = strategy_->name() == "ddp" && strategy_->holds_whole_state();
  const bool zero_1_or_2 = strategy_->name() == "zero" && strategy_->shards_live_state();
  if ((!plain_ddp && !zero_1_or_2) || config_.parallel.ep > 1 || config_.parallel.cp > 1 || !strategy_->keeps_whole_model())
    cannot = concat("the ", strategy_->name(), " strategy",
                    strategy_->name() == "zero" ? concat(" at stage ", config_.distributed.zero_stage) : std::string(),
                    config_.parallel.ep > 1 ? " with expert parallelism" : config_.parallel.cp > 1 ? " with context parallelism" : "",
                    " (live membership carries plain ddp and zero stages 1 and 2; the others restart from the survivors' "
                    "save or a checkpoint)");
  else if (backend != "auto" && backend != "shm" && backend != "tcp")
    cannot = concat("distributed.backend = '", backend, "' (its groups cannot be left: use auto, shm or tcp)");
  else if (config_.train.global_batch_size <= 0)
    cannot = "a global batch that changes with the world size (set train.global_batch_size: the lost rank's share "
             "then moves to the others, and every world size reads the same samples per step)";
  else if (!every_size_divides)
    cannot = concat("train.global_batch_size ", global, ", which a smaller world (down to 1) does not divide");
  else if (train_set_->reads_one_share() || eval_set_->reads_one_share())
    cannot = "a table each rank reads a byte range of (its shares cannot move to other ranks)";
  else if (config_.distributed.sync_batchnorm)
    cannot = "distributed.sync_batchnorm";
  if (cannot.empty()) return true;
  TESSERA_CHECK(mode != "on", "[train] distributed.live_membership = \"on\" cannot carry ", cannot,
                "; set it to \"off\" (or \"auto\": on where it can be)");
  return false;
}

void Trainer::start_live_membership() {
  if (live_ || !wants_live_membership()) return;
  launch_rank_ = dist::launcher::worker_env_from_environment().rank;
  auto root = dist::store_from_env(collective_timeout(config_));
  live_ = dist::LiveMembership::launched(std::move(root), rank(), world_size(), live_options(config_));
  strategy_->commit_step(*optimizer_, step_);  // ZeRO: each rank's pieces on its neighbour from the start
  if (rank() == 0)
    std::fprintf(stderr,
                 "[live] live membership (distributed.live_membership = %s): a lost rank's peers go on without "
                 "restarting; a replacement joins at a step boundary\n",
                 config_.distributed.live_membership.c_str());
}

std::unique_ptr<Trainer> Trainer::join_live_job(TrainConfig config) {
  validate(config);
  const int slot = dist::launcher::worker_env_from_environment().rank;
  const Milliseconds timeout = collective_timeout(config);
  auto root = dist::store_from_env(timeout);
  root->set_timeout(timeout);
  // Until it has a group to beat for it, the joiner beats itself in its slot, where an elastic agent
  // watches: a process loading its data or waiting for admission is busy or idle, not stalled.
  dist::Heartbeat idle;
  const Milliseconds beat = heartbeat_interval();
  auto beat_once = [&] {
    if (beat <= Milliseconds(0)) return;
    ++idle.count;
    root->set(dist::worker_heartbeat_key(slot), dist::format_heartbeat(idle));
  };
  beat_once();
  // Everything that takes time before asking: once admitted, the members wait for this process.
  Datasets data = load_datasets(config);
  beat_once();
  auto live = dist::LiveMembership::asking_to_join(root, concat("j", slot, "-", ::getpid()), live_options(config));
  std::fprintf(stderr, "[live] joining the running job in rank %d's slot\n", slot);
  // Admission comes at a member's step boundary; a job that ends first says so (dist::JobEnded).
  const auto give_up = std::chrono::steady_clock::now() + timeout;
  try {
    while (true) {
      beat_once();
      try {
        live->join({0, 0}, beat > Milliseconds(0) ? std::min(beat * 2, Milliseconds(1000)) : Milliseconds(1000));
        break;
      } catch (const dist::NotAdmittedYet&) {
        if (std::chrono::steady_clock::now() >= give_up) throw;
      } catch (const dist::LateForEpoch&) {
        // The round closed without it (its settle time passed first): it asks again.
      }
    }
  } catch (const dist::JobEnded&) {
    std::fprintf(stderr, "[live] the job ended before this process was admitted; nothing to do\n");
    return nullptr;
  }
  const dist::LiveEpoch& e = live->current();
  auto group = live->make_group(config.distributed.backend, timeout, slot, heartbeat_interval());
  std::unique_ptr<Trainer> trainer(new Trainer(std::move(config), std::move(group), std::move(data)));
  trainer->live_ = std::move(live);
  trainer->take_live_state_ = true;
  trainer->launch_rank_ = slot;
  trainer->layout_epoch_ = e.number;
  std::fprintf(stderr, "[live] admitted as rank %d of %d (epoch %lld)\n", e.rank, e.size(),
               static_cast<long long>(e.number));
  return trainer;
}

std::pair<bool, bool> Trainer::live_step_boundary() {
  // Rank 0 admits the joiners before the collective that tells the others: by the time they learn
  // of the round, its expected count is in the store. A stop wins: joiners admitted into a round
  // that never comes see the job's end (live/done) instead.
  const bool max_steps_reached = config_.train.max_steps > 0 && step_ >= config_.train.max_steps;
  // Rank 0 looks at most every 50 ms (two store reads), not every step: a short step would pay for
  // it, and a joiner waits a step boundary anyway.
  bool admitted = false;
  const auto now = std::chrono::steady_clock::now();
  // Nor at a step that saves a checkpoint: rank 0 would arrive at the round after its save, late.
  const bool saving = config_.train.checkpoint_every > 0 && step_ % config_.train.checkpoint_every == 0;
  if (rank() == 0 && !stop_requested_ && !max_steps_reached && !saving &&
      now - last_joiner_check_ >= std::chrono::milliseconds(50)) {
    last_joiner_check_ = now;
    admitted = live_->admit_joiners() > 0;
  }
  const int64_t agreed = strategy_->max_over_job((stop_requested_ ? 1 : 0) + (admitted ? 2 : 0));
  const bool stop = (agreed & 1) != 0 || max_steps_reached;
  return {stop, agreed >= 2 && !stop};
}

std::string Trainer::encode_live_state() {
  std::lock_guard lock(state_mu_);
  auto [model, trainer] = checkpoint_files(model_->state_dict(), optimizer_->state_dict(), rng_at_step_.state());
  return pack(io::encode_safetensors(model.tensors, model.metadata),
              io::encode_safetensors(trainer.tensors, trainer.metadata));
}

void Trainer::share_live_state(int source, const std::string& mine, std::vector<Tensor> params) {
  const bool sending = group_->rank() == source;
  Tensor size = from_vector(std::vector<int64_t>{sending ? static_cast<int64_t>(mine.size()) : 0}, {1});
  group_->broadcast(size, source)->wait();
  const int64_t bytes = size.to_vector<int64_t>()[0];
  TESSERA_CHECK(bytes > 0, "[live membership] rank ", source, " sent an empty state");
  // As int64 words: the collectives carry the engine's dtypes, and bytes are not one of them.
  Tensor words = zeros({(bytes + 7) / 8}, DType::Int64);
  if (sending) std::memcpy(words.data_ptr(), mine.data(), mine.size());
  group_->broadcast(words, source)->wait();
  const std::string_view all(static_cast<const char*>(words.data_ptr()), static_cast<size_t>(bytes));
  auto [model_bytes, trainer_bytes] = unpack(all);
  const std::string from = concat("the state of live member rank ", source);
  io::SafetensorsFile model = io::decode_safetensors(model_bytes, from + " (model)");
  io::SafetensorsFile trainer = io::decode_safetensors(trainer_bytes, from + " (trainer)");
  {
    std::lock_guard lock(state_mu_);
    if (!params.empty()) optimizer_->replace_params(std::move(params));
    strategy_->load_model_state(model.tensors);
    strategy_->load_optimizer_state(*optimizer_, trainer.tensors);
    // A source at the end of an epoch has not evaluated it yet: every member does, next.
    restore_position(trainer.metadata, from, /*past_an_epochs_end=*/false);
    rng_at_step_ = default_generator();
  }
  // ZeRO: the new layout's pieces on their neighbours, and a collective that completes only once
  // every member committed them: after it, the layouts before are not needed.
  strategy_->commit_step(*optimizer_, step_);
  if (strategy_->shard_buddies() != nullptr) strategy_->max_over_job(0);
}

std::vector<std::pair<int64_t, const parallel::zero::ShardBuddies*>> Trainer::held_layouts() const {
  std::vector<std::pair<int64_t, const parallel::zero::ShardBuddies*>> out;
  auto add = [&out](const Strategy* strategy, int64_t built_in) {
    const parallel::zero::ShardBuddies* buddies = strategy ? strategy->shard_buddies() : nullptr;
    if (buddies != nullptr && buddies->committed()) out.emplace_back(built_in, buddies);
  };
  add(strategy_.get(), layout_epoch_);
  for (auto it = retired_.rbegin(); it != retired_.rend(); ++it) add(it->strategy.get(), it->epoch);
  return out;
}

int Trainer::gather_sharded_state(const dist::LiveEpoch& e, dist::ProcessGroup& group) {
  const int me = group.rank();
  auto max_over_group = [&group](std::vector<int64_t> values) {
    Tensor t = from_vector(values, {static_cast<int64_t>(values.size())});
    group.blocking_allreduce(t, dist::ReduceOp::Max);
    return t.to_vector<int64_t>();
  };
  // The layouts this process holds pieces in, newest first. The members look at the newest any of
  // them holds; where its pieces are not all there (a change to it that failed half-way: some
  // members committed in it, some did not), at the one before, and so on. Every layout a member
  // keeps holds the same state (a change moves no step).
  const auto layouts = held_layouts();
  constexpr int64_t kNone = std::numeric_limits<int64_t>::min();
  constexpr int64_t kRanks = int64_t{1} << 24;
  const parallel::zero::ShardBuddies* held = nullptr;
  int old_world = 0, source = -1;
  int64_t step = 0;
  std::vector<int> holder;
  std::string missing;
  for (int64_t below = std::numeric_limits<int64_t>::max();;) {
    held = nullptr;
    int64_t layout = -1;
    for (const auto& [built_in, buddies] : layouts)
      if (built_in < below) {
        held = buddies, layout = built_in;
        break;
      }
    const int64_t newest = max_over_group({held ? layout : -1})[0];
    if (layout != newest) held = nullptr;  // it takes part as a joiner does, holding nothing
    if (newest < 0) {
      if (below == std::numeric_limits<int64_t>::max()) {  // a world of one held the whole state
        live_steps_redone_ = 0;
        return e.source;  // the round's source sends it, as DDP's
      }
      break;  // no layout holds every piece
    }
    // The layout's size, and the lowest and highest step among its members: the lowest is rebuilt.
    const auto steps = max_over_group({held ? held->world() : 0, held ? -step_ : kNone, held ? step_ : kNone});
    old_world = static_cast<int>(steps[0]);
    step = -steps[1];
    // The furthest since the change's first try: a member that took a failed try's state went back.
    live_furthest_step_ = std::max(live_furthest_step_, steps[2]);
    live_steps_redone_ = live_furthest_step_ - step;
    // Who holds each old rank's pieces of that step (its own process, else the next rank, its
    // buddy), and the source: a member at that step (the latest epoch of the data, the lowest rank).
    std::vector<int64_t> table(1 + 2 * static_cast<size_t>(old_world), -1);
    if (held != nullptr) {
      const int r = held->rank();
      if (step_ == step && held->own_at(step)) table[0] = epoch_ * kRanks + (kRanks - 1 - me);
      if (held->own_at(step)) table[1 + r] = me;
      if (old_world > 1 && held->previous_rank_at(step)) table[1 + old_world + (r + old_world - 1) % old_world] = me;
    }
    table = max_over_group(std::move(table));
    holder.assign(static_cast<size_t>(old_world), -1);
    missing.clear();
    for (int k = 0; k < old_world; ++k) {
      const int64_t own = table[1 + k], kept = table[1 + old_world + k];
      if (own < 0 && kept < 0) missing += concat(missing.empty() ? "" : ", ", k, " (kept by ", (k + 1) % old_world, ")");
      holder[static_cast<size_t>(k)] = static_cast<int>(own >= 0 ? own : kept);
    }
    if (missing.empty() && table[0] >= 0) {
      source = static_cast<int>(kRanks - 1 - table[0] % kRanks);
      break;
    }
    if (missing.empty()) missing = concat("every rank's own (no member at step ", step, ")");
    below = newest;
  }
  if (source < 0) {
    // A survivor busy in a long step may have arrived after the round closed: it asks to join as a
    // new process does, holding its pieces still. Rank 0 admits whoever asks within half the
    // collective timeout (at most 30 s), and every member meets them in the next round.
    int64_t admitted = 0;
    if (me == 0 && live_) {
      const auto until = std::chrono::steady_clock::now() + std::min(collective_timeout(config_) / 2, Milliseconds(30000));
      while ((admitted = live_->admit_joiners()) == 0 && std::chrono::steady_clock::now() < until)
        std::this_thread::sleep_for(std::chrono::milliseconds(50));  // two store reads a look, as at a step boundary
    }
    if (max_over_group({admitted})[0] > 0)
      throw PeerFailureError(concat("[live membership] no member holds the ZeRO pieces of rank(s) ", missing,
                                    " of the last layout; meeting again with the processes that asked to join since"));
    throw dist::LiveStateLost(concat("[live membership] the ZeRO pieces of rank(s) ", missing, " of the last layout "
                                     "were lost with the rank and with the neighbour that kept them: that part of the "
                                     "optimizer state is gone, so the job cannot go on live (an elastic agent restarts "
                                     "it from its last checkpoint)"));
  }
  // Every old rank's pieces to the source; it rebuilds the whole state and encodes it as DDP's.
  constexpr int kPiecesTag = 0x5b00;  // + the old rank whose pieces travel
  std::vector<parallel::zero::PackedPieces> by_rank(static_cast<size_t>(old_world));
  std::vector<dist::WorkPtr> sends;
  for (int k = 0; k < old_world; ++k) {
    const int h = holder[static_cast<size_t>(k)];
    if (h != me && me != source) continue;
    const parallel::zero::PackedPieces* pieces =
        h == me ? (held->rank() == k ? held->own_at(step) : held->previous_rank_at(step)) : nullptr;
    if (me != source)
      sends.push_back(parallel::zero::send_pieces(group, *pieces, source, kPiecesTag + k));
    else
      by_rank[static_cast<size_t>(k)] =
          pieces ? *pieces
                 : parallel::zero::receive_pieces(group, h, kPiecesTag + k, held->zero(), k, held->own_at(step)->buffers);
  }
  for (auto& w : sends) w->wait();
  if (me == source) {
    auto [model_state, optimizer_state] = held->zero().whole_state_of(by_rank);
    std::lock_guard lock(state_mu_);
    auto [model, trainer] = checkpoint_files(std::move(model_state), std::move(optimizer_state), rng_at_step_.state());
    pending_state_ = pack(io::encode_safetensors(model.tensors, model.metadata),
                          io::encode_safetensors(trainer.tensors, trainer.metadata));
  }
  return source;
}

void Trainer::change_membership(const std::string& cause, std::optional<ChangeStart> since) {
  record_progress(dist::launcher::ProgressRecord::Phase::Other);  // a membership round is not a wedge
  if (!since) live_furthest_step_ = -1;  // a first try (regroup_after_failure's are reset there)
  const ChangeStart first = since.value_or(ChangeStart{std::chrono::steady_clock::now(), live_->current().size(),
                                                       live_->current().number});
  const auto started = first.at;
  const int old_world = first.world;
  const int64_t old_epoch = first.epoch;
  const dist::LivePosition mine{step_, epoch_};
  // Leave the failed (or outgrown) group first: a peer still waiting for this rank in it stops at
  // once instead of at the timeout. The group itself goes once the new one works (the strategy,
  // which holds it, describes the state the source sends).
  if (group_) group_->leave();
  const dist::LiveEpoch* e = nullptr;
  try {
    e = &live_->next_epoch(mine);
  } catch (const dist::LateForEpoch&) {
    // The others closed the round without this rank: it joins as a new process would, at their
    // next step boundary, and takes the state then (dist::JobEnded if the job ends first).
    std::fprintf(stderr, "[live] %s: the round closed before this rank arrived; joining again\n", live_->id().c_str());
    for (int attempt = 0;; ++attempt) {
      try {
        e = &live_->join(mine, collective_timeout(config_));
        break;
      } catch (const dist::LateForEpoch&) {
        if (attempt == 8) throw;
      }
    }
  }
  // The source's state, encoded once: a change that fails after this (another member lost) and is
  // tried again sends the same. Nothing below touches this rank's own state until every member has
  // the source's (DDP's prepare does not broadcast here: StrategyEnvironment::live_rebuild). ZeRO's
  // state is rebuilt from the pieces its members keep, below (gather_sharded_state).
  if (e->rank == e->source && pending_state_.empty() && held_layouts().empty()) pending_state_ = encode_live_state();
  // The new group and strategy are built aside and swapped in whole: a failure while they form
  // leaves the old ones (left, not destroyed) for the next try, and the survivors' save thread
  // never sees a strategy half made. The old strategy is kept until the change completes: ZeRO's
  // pieces are in it.
  dist::ProcessGroupPtr group =
      live_->make_group(config_.distributed.backend, collective_timeout(config_), launch_rank_, heartbeat_interval());
  StrategyEnvironment env{group, train_set_, std::nullopt, 0};
  env.live_rebuild = true;
  std::unique_ptr<Strategy> strategy = make_strategy(config_, env);
  const ModelEntry& model_kind = model_entry(config_.model.name);
  if (model_kind.objective) strategy->set_objective(model_kind.objective(config_));
  // DDP's are the model's own parameters, which the optimizer keeps; ZeRO's are new pieces.
  std::vector<Tensor> params = strategy->prepare(model_);
  strategy->set_training(true);
  live_steps_redone_ = 0;
  const int source = live_state_is_sharded() ? gather_sharded_state(*e, *group) : e->source;
  std::unique_ptr<Strategy> outgoing;  // destroyed after the lock is released
  {
    std::lock_guard lock(state_mu_);
    // ZeRO's strategy with pieces is kept until the change completes (a further try may need
    // them); DDP's reducer and buckets, and a strategy that never committed, go now.
    const parallel::zero::ShardBuddies* buddies = strategy_->shard_buddies();
    if (buddies != nullptr && buddies->committed())
      retired_.push_back({layout_epoch_, std::move(strategy_)});
    else
      outgoing = std::move(strategy_);
    strategy_ = std::move(strategy);
    layout_epoch_ = e->number;
    group_ = std::move(group);
  }
  outgoing.reset();
  build_data();
  share_live_state(source, pending_state_, live_state_is_sharded() ? std::move(params) : std::vector<Tensor>{});
  pending_state_.clear();
  retired_.clear();  // every member committed in the new layout (share_live_state's last collective)
  reading_batches_ = false;
  elastic_ = ElasticReport::from_environment(rank());  // the new rank 0 reports the steps
  record_progress(dist::launcher::ProgressRecord::Phase::Step);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  if (rank() != 0) return;
  std::string brief = cause.substr(0, std::min<size_t>(cause.size(), 200));
  std::fprintf(stderr,
               "[live] epoch %lld: %d rank(s) go on (were %d in epoch %lld) at step %lld, the state of rank %d; "
               "steps redone: %lld; %.2f s; cause: %s\n",
               static_cast<long long>(e->number), e->size(), old_world, static_cast<long long>(old_epoch),
               static_cast<long long>(step_), source, static_cast<long long>(live_steps_redone_), seconds, brief.c_str());
  membership_changes_.push_back({{"type", "membership"}, {"live_epoch", e->number}, {"step", step_},
                                 {"steps_redone", live_steps_redone_}, {"world_size", e->size()},
                                 {"previous_world_size", old_world}, {"seconds", seconds}, {"cause", brief}});
}

void Trainer::regroup_after_failure(const std::string& cause) {
  // Each attempt after the first means another peer was lost meanwhile (or ZeRO's members meet
  // again with a late one). The change is reported once, from its first cause and start.
  constexpr int kAttempts = 8;
  const ChangeStart first{std::chrono::steady_clock::now(), live_->current().size(), live_->current().number};
  live_furthest_step_ = -1;
  auto try_again = [&](int attempt, const Error& e) {
    if (attempt == kAttempts) throw;
    const std::string why = e.what();
    std::fprintf(stderr, "[live] %s: membership change, try %d: %s; trying again\n", live_->id().c_str(), attempt,
                 why.substr(0, std::min<size_t>(why.size(), 300)).c_str());
  };
  for (int attempt = 1;; ++attempt) {
    try {
      change_membership(cause, first);
      return;
    } catch (const dist::NotAdmittedYet&) {
      throw;
    } catch (const PeerFailureError& e) {
      try_again(attempt, e);
    } catch (const TimeoutError& e) {
      try_again(attempt, e);
    }
  }
}

void Trainer::end_live_membership() {
  if (!live_ || rank() != 0) return;
  try {
    live_->mark_job_done();
  } catch (const Error&) {
  }
}

}  // namespace tessera::train
