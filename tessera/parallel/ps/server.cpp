#include "tessera/parallel/ps/server.h"

#include "tessera/parallel/ps/server_checkpoint.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>
#include <tuple>
#include <unordered_map>

#include "tessera/core/error.h"
#include "tessera/dist/net/framed_server.h"
#include "tessera/io/safetensors.h"
#include "tessera/ops/ops.h"
#include "tessera/parallel/ps/consistency.h"
#include "tessera/parallel/ps/protocol.h"
#include "tessera/parallel/ps/shm_channel.h"
#include "tessera/parallel/ps/server_shard.h"
#include "tessera/parallel/ps/shard_plan.h"

namespace tessera::parallel::ps {

namespace fs = std::filesystem;
using dist::net::Clock;
using dist::net::ConnectionId;
using tessera::detail::concat;

void publish_server_address(dist::Store& store, int server_rank, const std::string& address) {
  store.set(concat("ps/server/", server_rank), address);
}

std::vector<std::string> lookup_server_addresses(dist::Store& store, int num_servers) {
  std::vector<std::string> keys, out;
  for (int i = 0; i < num_servers; ++i) keys.push_back(concat("ps/server/", i));
  store.wait(keys);  // TimeoutError naming the servers that never came up
  for (const auto& k : keys) out.push_back(store.get_string(k));
  return out;
}

// Named, not anonymous: Impl holds Workers, and in a unity build this file is included into another,
// where GCC takes a member of internal-linkage type for a mistake (-Wsubobject-linkage).
namespace server_state {

struct Worker {
  bool connected = false, done = false, lost = false;
  ConnectionId conn = 0;
  std::string peer;
  int64_t clock = 0;  // gradients pushed (its global step)
  Clock::time_point last_seen{};
  bool waiting = false;  // a pull is held until the consistency rule allows it
  int64_t pull_clock = 0;
  bool pull_dense = true;
  std::vector<std::pair<int, std::vector<int64_t>>> pull_rows;  // sparse part of the held pull
  bool pull_in_shm = false;  // the held pull's dense values go to the shared-memory channel
  ShmChannel shm;            // attached when the worker runs on this machine (shm_channel.h)
  std::vector<int64_t> shm_offsets;  // per held piece: where it is in the segment's dense layout
  bool active() const { return !done && !lost; }
};

}  // namespace server_state

namespace {

using server_state::Worker;

std::string describe(const ParamSpec& s) {
  return concat("'", s.name, "' ", s.rows, "x", s.row_size, s.sparse ? " (sparse)" : "");
}

}  // namespace

struct ParameterServer::Impl : dist::net::FramedServer::Handler {
  ServerOptions options;
  dist::net::FramedServer net;
  Clock::time_point started = Clock::now();
  std::vector<Worker> workers;
  std::map<ConnectionId, int> rank_of;
  std::optional<ServerShard> shard;  // once the first worker registered the model
  bool ready = false;  // initialised or restored: pulls may be answered
  ConsistencyRule rule;  // when pushes are applied and pulls answered (consistency.h)
  // Kept from request to request for their memory: megabytes every step would otherwise be
  // allocated, page-faulted in and given back (a fifth of the CPU of `tessera bench ps` on the MLP).
  std::vector<float> pushed;
  Bytes values_frame;
  ServerReport report;
  std::string fatal;  // set when run() must fail

  explicit Impl(ServerOptions o)
      : options(std::move(o)), net(net_options(options)), rule(options.mode, options.staleness) {
    TESSERA_CHECK(options.num_workers >= 1 && options.server_rank >= 0 && options.server_rank < options.num_servers,
                  "[ps] server ", options.server_rank, " of ", options.num_servers, " with ", options.num_workers,
                  " workers");
    if (!options.log) options.log = [](const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); };
    workers.resize(static_cast<size_t>(options.num_workers));
  }

  static dist::net::FramedServerOptions net_options(const ServerOptions& o) {
    dist::net::FramedServerOptions n;
    n.name = concat("ps server ", o.server_rank);
    n.host = o.host;
    n.port = o.port;
    n.token = o.token;
    n.protocol_version = kPsProtocolVersion;
    n.max_message_bytes = o.max_message_bytes;
    n.log = o.log;
    return n;
  }

  void log(const std::string& line) const { options.log(concat("[ps server ", options.server_rank, "] ", line)); }
  void fail(const std::string& why) {
    if (fatal.empty()) fatal = why;
    net.stop();
  }
  void reply_ok(ConnectionId id) { net.send(id, FrameWriter(uint8_t(PsReply::kOk)).finish()); }
  void reply_error(ConnectionId id, const std::string& why) {
    net.send(id, FrameWriter(uint8_t(PsReply::kError)).str(concat("ps server ", options.server_rank, ": ", why)).finish());
  }

  // --- connections -------------------------------------------------------------------------------
  void on_connect(ConnectionId id, int64_t rank) override {
    if (rank < 0 || rank >= options.num_workers) {
      net.close(id, concat("rank ", rank, " is outside this job's ", options.num_workers, " workers"));
      return;
    }
    Worker& w = workers[rank];
    if (w.connected && !w.lost && !w.done) {
      net.close(id, concat("worker ", rank, " is already connected from ", w.peer));
      return;
    }
    w.connected = true;
    w.conn = id;
    w.peer = net.peer(id);
    w.last_seen = Clock::now();
    rank_of[id] = static_cast<int>(rank);
  }

  void on_disconnect(ConnectionId id, const std::string& why) override {
    auto it = rank_of.find(id);
    if (it == rank_of.end()) return;
    int rank = it->second;
    rank_of.erase(it);
    Worker& w = workers[rank];
    if (w.done || w.lost || w.conn != id) return;
    lose(rank, concat("worker ", rank, " (", w.peer, ") ", why, " at step ", w.clock, " without finishing"));
  }

  void lose(int rank, const std::string& what) {
    Worker& w = workers[rank];
    w.lost = true;
    w.waiting = false;
    report.lost_workers.push_back(rank);
    if (rule.needs_every_worker()) return fail(concat(what, "; synchronous training cannot go on without it"));
    log(concat(what, "; going on with the ", active_workers(), " other workers (", rule.describe(), ")"));
    after_change();
  }

  int active_workers() const {
    int n = 0;
    for (const auto& w : workers) n += w.active();
    return n;
  }

  Clock::time_point next_deadline() override {
    Clock::time_point next = Clock::time_point::max();
    bool all_connected = std::all_of(workers.begin(), workers.end(), [](const Worker& w) { return w.connected; });
    if (!all_connected) next = started + options.timeout;
    for (const auto& w : workers)
      if (w.connected && w.active() && !w.waiting) next = std::min(next, w.last_seen + options.timeout);
    return next;
  }

  void on_tick() override {
    auto now = Clock::now();
    std::vector<int> missing;
    for (int r = 0; r < options.num_workers; ++r)
      if (!workers[r].connected) missing.push_back(r);
    if (!missing.empty() && now >= started + options.timeout) {
      std::string list;
      for (int r : missing) list += (list.empty() ? "" : ", ") + std::to_string(r);
      return fail(concat("workers [", list, "] did not connect within ", options.timeout.count(), " ms"));
    }
    for (int r = 0; r < options.num_workers; ++r) {
      Worker& w = workers[r];
      if (w.connected && w.active() && !w.waiting && now >= w.last_seen + options.timeout)
        lose(r, concat("worker ", r, " (", w.peer, ") sent nothing for ", options.timeout.count(), " ms at step ",
                       w.clock));
    }
  }

  // --- requests ----------------------------------------------------------------------------------
  void on_frame(ConnectionId id, uint8_t opcode, FrameReader& r) override {
    auto it = rank_of.find(id);
    if (it == rank_of.end()) return;
    int rank = it->second;
    Worker& w = workers[rank];
    w.last_seen = Clock::now();
    switch (PsOp(opcode)) {
      case PsOp::kRegister: return on_register(id, w, r);
      case PsOp::kInit: return on_init(id, r);
      case PsOp::kInitDone:
        r.expect_end();
        ready = true;
        reply_ok(id);
        return after_change();
      case PsOp::kRestore: return on_restore(id, r);
      case PsOp::kPush: return on_push(id, rank, r, false);
      case PsOp::kPull: return on_pull(id, rank, r, false);
      case PsOp::kAttachShm: return on_attach(id, w, r);
      case PsOp::kPushShm: return on_push(id, rank, r, true);
      case PsOp::kPullShm: return on_pull(id, rank, r, true);
      case PsOp::kSave: return on_save(id, r);
      case PsOp::kDone:
        r.expect_end();
        w.done = true;
        report.finished_workers.push_back(rank);
        reply_ok(id);
        return after_change();
    }
    throw ProtocolError(concat("unknown opcode ", int(opcode)));
  }

  void on_register(ConnectionId id, Worker& w, FrameReader& r) {
    w.clock = r.i64();
    uint32_t n = r.u32();
    if (n == 0 || n > 1000000) throw ProtocolError(concat("a model of ", n, " parameters"));
    std::vector<ParamSpec> specs;
    for (uint32_t i = 0; i < n; ++i) specs.push_back(read_spec(r));
    r.expect_end();
    if (!shard) {
      create_shard(std::move(specs));
      return reply_ok(id);
    }
    const auto& known = shard->plan().specs();
    for (size_t i = 0; i < std::max(known.size(), specs.size()); ++i) {
      if (i < known.size() && i < specs.size() && known[i] == specs[i]) continue;
      return reply_error(id, concat("this worker's model differs from the one registered first: parameter ", i, " is ",
                                    i < specs.size() ? describe(specs[i]) : "missing", ", registered ",
                                    i < known.size() ? describe(known[i]) : "nothing"));
    }
    reply_ok(id);
  }

  void create_shard(std::vector<ParamSpec> specs) {
    shard.emplace(std::move(specs), options.server_rank, options.num_servers, options.optimizer);
    report.elements = shard->elements();
    log(concat("holds ", shard->held().size(), " pieces of ", shard->plan().specs().size(), " parameters: ", report.elements,
               " elements; ", rule.describe(), ", ", options.num_workers, " workers"));
  }

  ServerShard& registered(const char* what) {
    if (!shard) throw ProtocolError(concat(what, " before the model was registered"));
    return *shard;
  }

  void on_init(ConnectionId id, FrameReader& r) {
    uint32_t piece = r.u32();
    int64_t first_row = r.i64();
    ServerShard& held = registered("init");
    auto [data, n] = r.bytes_view();
    r.expect_end();
    held.init_rows(piece, first_row, data, n, /*write=*/!ready);  // restored from a checkpoint: the checkpoint wins
    reply_ok(id);
  }

  // The worker offers a shared-memory channel; anything that keeps it from being used is told back
  // (kAttached 0), and the worker goes on over TCP.
  void on_attach(ConnectionId id, Worker& w, FrameReader& r) {
    const std::string name = r.str();
    const int64_t bytes = r.i64();
    auto [nonce_data, nonce_size] = r.bytes_view();
    if (nonce_size != ShmNonce{}.size()) throw ProtocolError(concat("a shared-memory nonce of ", nonce_size, " bytes"));
    ShmNonce nonce;
    std::memcpy(nonce.data(), nonce_data, nonce.size());
    const uint32_t k = r.u32();
    using Offer = std::tuple<uint32_t, int64_t, int64_t>;  // piece, offset in the dense layout, floats
    std::vector<Offer> offered;
    for (uint32_t i = 0; i < k && i <= shard_pieces(); ++i) {
      const uint32_t piece = r.u32();
      const int64_t offset = r.i64();
      offered.emplace_back(piece, offset, r.i64());
    }
    r.expect_end();
    const ServerShard& holder = registered("attach");
    const ShardPlan& plan = holder.plan();
    std::vector<Offer> mine;
    std::vector<int64_t> offsets;  // per held piece
    for (const auto& h : holder.held()) {
      const int64_t offset = h.sparse ? -1 : plan.piece_offset(plan.pieces()[h.piece]);
      if (!h.sparse) mine.emplace_back(static_cast<uint32_t>(h.piece), offset, h.values.numel());
      offsets.push_back(offset);
    }
    std::string why;
    if (offered != mine) {
      why = "the dense pieces it offered are not this server's, or not where the shard plan puts them";
    } else {
      try {
        w.shm = ShmChannel::open(name, static_cast<size_t>(std::max<int64_t>(bytes, 0)), plan.dense_elements(), nonce);
        w.shm_offsets = std::move(offsets);
      } catch (const std::exception& e) {
        why = e.what();
      }
    }
    if (!why.empty()) log(concat("worker ", w.peer, ": no shared-memory channel, values go over TCP: ", why));
    net.send(id, FrameWriter(uint8_t(PsReply::kAttached)).u8(why.empty()).str(why).finish());
  }
  size_t shard_pieces() const { return shard ? shard->plan().pieces().size() : 0; }

  void on_push(ConnectionId id, int rank, FrameReader& r, bool dense_in_shm) {
    Worker& w = workers[rank];
    const int64_t clock = r.i64();
    const double lr = bits_double(r.i64());
    if (!ready) throw ProtocolError("push before the parameters were initialised");
    if (clock != w.clock) throw ProtocolError(concat("push of step ", clock, " after ", w.clock, " pushes"));
    if (auto refused = rule.refuse_push(clock, rank)) return reply_error(id, *refused);
    uint32_t n = r.u32();
    if (dense_in_shm) {
      if (!w.shm.attached()) throw ProtocolError("a push through shared memory without a channel");
      if (n != 0) throw ProtocolError("a push through shared memory with dense values in the frame");
      auto& held = registered("push").held();
      for (size_t i = 0; i < held.size(); ++i) {
        HeldPiece& h = held[i];
        if (h.sparse) continue;
        const size_t count = static_cast<size_t>(h.values.numel());
        const float* pushed_here = w.shm.push_region() + w.shm_offsets[i];
        float* grad = h.grad.data<float>();
        if (rule.sums_pushes()) {
          for (size_t k = 0; k < count; ++k) grad[k] += pushed_here[k];
        } else {
          std::memcpy(grad, pushed_here, count * sizeof(float));
        }
        report.bytes_received += static_cast<int64_t>(count * sizeof(float));
      }
    }
    for (uint32_t i = 0; i < n; ++i) {
      uint32_t piece = r.u32();
      HeldPiece& h = registered("push").piece(piece, "push");
      if (h.sparse) throw ProtocolError(concat("dense push of sparse piece ", piece));
      const size_t count = static_cast<size_t>(h.values.numel());
      if (rule.sums_pushes()) {
        pushed.resize(count);
        read_floats(r, pushed.data(), count, "pushed gradient");
        float* sum = h.grad.data<float>();
        const float* add = pushed.data();
        for (size_t k = 0; k < count; ++k) sum[k] += add[k];
      } else {
        read_floats(r, h.grad.data<float>(), count, "pushed gradient");
      }
      report.bytes_received += static_cast<int64_t>(count * sizeof(float));
    }
    uint32_t m = r.u32();
    std::vector<RowsPush> sparse_rows;
    for (uint32_t i = 0; i < m; ++i) {
      uint32_t param = r.u32();
      std::vector<int64_t> ids = read_ids(r);
      HeldPiece& h = registered("sparse push").rows_of(param, ids, "sparse push");
      const int64_t rs = shard->row_size(h);
      std::vector<float> grads(ids.size() * rs);
      read_floats(r, grads.data(), grads.size(), "pushed row gradients");
      const int64_t begin = shard->row_begin(h);
      for (auto& id : ids) id -= begin;
      report.bytes_received += static_cast<int64_t>(grads.size() * sizeof(float) + ids.size() * sizeof(int64_t));
      sparse_rows.push_back({&h, std::move(ids), std::move(grads)});
    }
    r.expect_end();
    ++report.pushes;
    ++w.clock;
    if (rule.on_push(*shard, lr, sparse_rows)) ++report.updates;
    reply_ok(id);
    after_change();
  }

  void on_pull(ConnectionId id, int rank, FrameReader& r, bool dense_in_shm) {
    Worker& w = workers[rank];
    w.pull_clock = r.i64();
    w.pull_dense = r.u8() != 0;
    if (dense_in_shm && !w.shm.attached()) throw ProtocolError("a pull through shared memory without a channel");
    w.pull_in_shm = dense_in_shm && w.pull_dense;
    uint32_t m = r.u32();
    w.pull_rows.clear();
    for (uint32_t i = 0; i < m; ++i) {
      uint32_t param = r.u32();
      std::vector<int64_t> ids = read_ids(r);
      registered("sparse pull").rows_of(param, ids, "sparse pull");
      w.pull_rows.emplace_back(static_cast<int>(param), std::move(ids));
    }
    r.expect_end();
    w.waiting = true;
    net.hold(id);
    serve_pulls();
  }

  int64_t slowest_clock() const {
    int64_t slowest = INT64_MAX;
    for (const auto& w : workers)
      if (w.active()) slowest = std::min(slowest, w.connected ? w.clock : 0);
    return slowest;
  }

  bool may_serve(const Worker& w) const { return ready && rule.may_serve(w.pull_clock, slowest_clock()); }

  void serve_pulls() {
    for (int rank = 0; rank < options.num_workers; ++rank) {
      Worker& w = workers[rank];
      if (!w.waiting || !w.active() || !may_serve(w)) continue;
      int64_t slowest = slowest_clock();
      if (slowest != INT64_MAX) report.max_staleness = std::max(report.max_staleness, w.pull_clock - slowest);
      send_values(w);
      w.waiting = false;
      w.last_seen = Clock::now();
      net.release(w.conn);
      ++report.pulls;
    }
  }

  void send_values(const Worker& w) {
    if (w.pull_in_shm) {
      const auto& held = shard->held();
      for (size_t i = 0; i < held.size(); ++i) {
        if (held[i].sparse) continue;
        const size_t count = static_cast<size_t>(held[i].values.numel());
        std::memcpy(w.shm.pull_region() + w.shm_offsets[i], held[i].values.data<float>(), count * sizeof(float));
        report.bytes_sent += static_cast<int64_t>(count * sizeof(float));
      }
    }
    FrameWriter out(uint8_t(w.pull_in_shm ? PsReply::kValuesInShm : PsReply::kValues), std::move(values_frame));
    out.i64(rule.version());
    if (!w.pull_in_shm) write_dense_values(out, w);
    write_rows(out, w);
    values_frame = out.finish();
    net.send_taking(w.conn, values_frame);
  }

  void write_dense_values(FrameWriter& out, const Worker& w) {
    uint32_t dense = 0;
    for (const auto& h : shard->held()) dense += !h.sparse && w.pull_dense;
    out.u32(dense);
    for (const auto& h : shard->held()) {
      if (h.sparse || !w.pull_dense) continue;
      out.u32(static_cast<uint32_t>(h.piece));
      write_floats(out, h.values.data<float>(), static_cast<size_t>(h.values.numel()));
      report.bytes_sent += h.values.numel() * static_cast<int64_t>(sizeof(float));
    }
  }

  void write_rows(FrameWriter& out, const Worker& w) {
    out.u32(static_cast<uint32_t>(w.pull_rows.size()));
    std::vector<float> rows;
    for (const auto& [param, ids] : w.pull_rows) {
      const HeldPiece& h = shard->rows_of(static_cast<uint32_t>(param), {}, "pull");
      const int64_t rs = shard->row_size(h), begin = shard->row_begin(h);
      rows.resize(ids.size() * rs);
      const float* values = h.values.data<float>();
      for (size_t i = 0; i < ids.size(); ++i)
        std::memcpy(rows.data() + i * rs, values + (ids[i] - begin) * rs, rs * sizeof(float));
      write_floats(out, rows.data(), rows.size());
      report.bytes_sent += static_cast<int64_t>(rows.size() * sizeof(float));
    }
  }

  // After anything that can complete a step, unblock a pull or end the job. A worker that finished
  // early (uneven data) or was lost no longer counts towards a synchronous step.
  void after_change() {
    if (shard && rule.complete_step(*shard, active_workers())) ++report.updates;
    serve_pulls();
    if (std::all_of(workers.begin(), workers.end(), [](const Worker& w) { return w.connected && !w.active(); })) net.stop();
  }

  // --- checkpoints ------------------------------------------------------------------------------
  void on_save(ConnectionId id, FrameReader& r) {
    std::string dir = r.str();
    int64_t step = r.i64();
    r.expect_end();
    if (!shard || !ready) return reply_error(id, "save before the parameters were initialised");
    ShardCheckpoint at{options.server_rank, options.num_servers, step, rule.version(), options.keep_checkpoints};
    try {
      save_server_shard(dir, at, shard->plan(), shard->shards(), shard->optimizer().state_dict());
    } catch (const std::exception& e) {
      return reply_error(id, concat("could not save step ", step, " under ", dir, ": ", e.what()));
    }
    reply_ok(id);
  }

  void on_restore(ConnectionId id, FrameReader& r) {
    std::string dir = r.str();
    int64_t step = r.i64();
    r.expect_end();
    ServerShard& held = registered("restore");
    std::string from;
    try {
      std::vector<HeldShard> views = held.shards();
      RestoredShard restored = restore_server_shard(dir, step, options.server_rank, options.num_servers, held.plan(), views);
      held.optimizer().load_state_dict(restored.optimizer_state);
      rule.restore_version(restored.version);
      from = restored.from;
    } catch (const std::exception& e) {
      return reply_error(id, e.what());
    }
    ready = true;
    log(concat("restored step ", step, " from ", from));
    reply_ok(id);
    after_change();
  }
};

ParameterServer::ParameterServer(ServerOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {}
ParameterServer::~ParameterServer() = default;
std::string ParameterServer::address() const { return impl_->net.address(); }
uint16_t ParameterServer::port() const { return impl_->net.port(); }
void ParameterServer::stop() { impl_->net.stop(); }

ServerReport ParameterServer::run() {
  impl_->started = Clock::now();
  impl_->net.run(*impl_);
  if (!impl_->fatal.empty()) throw PeerFailureError(concat("[ps server ", impl_->options.server_rank, "] ", impl_->fatal));
  const auto& r = impl_->report;
  impl_->log(concat("finished: ", r.updates, " updates, ", r.pushes, " pushes, ", r.pulls, " pulls, ",
                    r.finished_workers.size(), " workers finished, ", r.lost_workers.size(),
                    " lost; largest staleness ", r.max_staleness,
                    impl_->rule.mode() == Mode::kBoundedStaleness ? concat(" (bound ", impl_->rule.staleness(), ")") : ""));
  return r;
}

}  // namespace tessera::parallel::ps
