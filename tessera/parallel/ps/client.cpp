#include "tessera/parallel/ps/client.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "tessera/core/error.h"
#include "tessera/parallel/ps/protocol.h"
#include "tessera/util/settings.h"

namespace tessera::parallel::ps {

using dist::detail::Clock;
using tessera::detail::concat;

namespace {

std::pair<std::string, uint16_t> split_address(const std::string& address) {
  size_t colon = address.rfind(':');
  TESSERA_CHECK(colon != std::string::npos && colon + 1 < address.size(), "[ps] server address '", address,
                "' is not host:port");
  std::string host = address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  int port = 0;
  try {
    port = std::stoi(address.substr(colon + 1));
  } catch (const std::exception&) {
  }
  TESSERA_CHECK(port > 0 && port < 65536, "[ps] server address '", address, "' has no valid port");
  return {host, static_cast<uint16_t>(port)};
}

}  // namespace

PsClient::PsClient(ClientOptions options) : options_(std::move(options)) {
  TESSERA_CHECK(!options_.servers.empty(), "[ps] worker ", options_.rank, " was given no servers");
  for (size_t i = 0; i < options_.servers.size(); ++i) {
    auto [host, port] = split_address(options_.servers[i]);
    dist::net::FramedClientOptions o;
    o.host = host;
    o.port = port;
    o.peer_name = concat("ps server ", i);
    o.token = options_.token;
    o.protocol_version = kPsProtocolVersion;
    o.rank = options_.rank;
    o.connect_timeout = options_.timeout;
    o.max_message_bytes = options_.max_message_bytes;
    servers_.push_back(std::make_unique<dist::net::FramedClient>(std::move(o)));
  }
}

PsClient::~PsClient() = default;

std::vector<Bytes> PsClient::round_trip(std::vector<Bytes> frames, const std::string& what) {
  std::vector<Bytes> replies;
  std::vector<Bytes>* requests[] = {&frames};
  std::vector<Bytes>* answers[] = {&replies};
  exchange(requests, answers, what);
  return replies;
}

void PsClient::exchange(std::span<std::vector<Bytes>* const> requests, std::span<std::vector<Bytes>* const> replies,
                        const std::string& what) {
  auto deadline = dist::detail::deadline_after(options_.timeout);
  for (size_t i = 0; i < servers_.size(); ++i)
    for (const auto* frames : requests)
      if (!(*frames)[i].empty()) servers_[i]->send((*frames)[i], deadline, what);
  auto start = Clock::now();
  for (size_t k = 0; k < requests.size(); ++k) replies[k]->resize(servers_.size());
  for (size_t i = 0; i < servers_.size(); ++i)
    for (size_t k = 0; k < requests.size(); ++k) {
      Bytes& reply = (*replies[k])[i];
      if ((*requests[k])[i].empty()) {
        reply.clear();
        continue;
      }
      servers_[i]->receive(reply, deadline, what);
      if (reply[0] == uint8_t(PsReply::kError)) {
        FrameReader r(reply.data() + 1, reply.size() - 1);
        throw PeerFailureError(concat("[ps] worker ", options_.rank, ": ", what, " failed: ", r.str()));
      }
    }
  counters_.wait_seconds += std::chrono::duration<double>(Clock::now() - start).count();
}

void PsClient::expect_ok(const Bytes& reply, size_t server, const std::string& what) {
  if (reply.size() != 1 || reply[0] != uint8_t(PsReply::kOk))
    throw PeerFailureError(concat("[ps] worker ", options_.rank, ": ", servers_[server]->description(),
                                  " answered ", what, " with opcode ", int(reply[0])));
}

void PsClient::register_model(std::vector<ParamSpec> specs, int64_t start_clock) {
  FrameWriter w(uint8_t(PsOp::kRegister));
  w.i64(start_clock).u32(static_cast<uint32_t>(specs.size()));
  for (const auto& s : specs) w.str(s.name).i64(s.rows).i64(s.row_size).u8(s.sparse);
  Bytes frame = w.finish();
  auto replies = round_trip(std::vector<Bytes>(servers_.size(), frame), "register");
  for (size_t i = 0; i < replies.size(); ++i) expect_ok(replies[i], i, "register");
  plan_.emplace(std::move(specs), static_cast<int>(servers_.size()));
}

int PsClient::attach_shared_memory() {
  TESSERA_CHECK(plan_, "[ps] attach_shared_memory before register_model");
  shm_.reset();
  shm_attached_.assign(servers_.size(), false);
  if (!env_flag("TESSERA_PS_SHM", true)) return 0;
  if (plan_->dense_elements() == 0) return 0;
  try {
    shm_ = std::make_shared<ShmChannel>(ShmChannel::create(plan_->dense_elements()));
  } catch (const IoError&) {
    return 0;  // no room in /dev/shm: the dense values go over TCP
  }
  const auto& specs = plan_->specs();
  std::vector<Bytes> frames(servers_.size()), replies;
  for (int s = 0; s < static_cast<int>(servers_.size()); ++s) {
    std::vector<int> pieces;
    for (int p : plan_->pieces_of(s))
      if (!specs[plan_->pieces()[p].param].sparse) pieces.push_back(p);
    if (pieces.empty()) continue;
    FrameWriter w(uint8_t(PsOp::kAttachShm));
    w.str(shm_->name()).i64(static_cast<int64_t>(shm_->bytes()));
    w.bytes(shm_->nonce().data(), shm_->nonce().size()).u32(static_cast<uint32_t>(pieces.size()));
    for (int p : pieces) {
      const Piece& piece = plan_->pieces()[p];
      w.u32(static_cast<uint32_t>(p)).i64(plan_->piece_offset(piece)).i64(piece.rows() * specs[piece.param].row_size);
    }
    frames[s] = w.finish();
  }
  std::vector<Bytes>* requests[] = {&frames};
  std::vector<Bytes>* answers[] = {&replies};
  // Mapped by every server that accepts once the replies are in, or never: nothing stays in /dev/shm.
  struct UnlinkAtEnd {
    std::string name;
    ~UnlinkAtEnd() { dist::detail::ShmSegment::unlink(name); }
  } unlink_at_end{shm_->name()};
  exchange(requests, answers, "attach of shared memory");
  int attached = 0;
  for (size_t s = 0; s < servers_.size(); ++s) {
    if (frames[s].empty()) continue;
    bool yes = false;
    try {
      if (replies[s].empty() || replies[s][0] != uint8_t(PsReply::kAttached)) throw ProtocolError("not a kAttached reply");
      FrameReader r(replies[s].data() + 1, replies[s].size() - 1);
      yes = r.u8() != 0;
      r.str();
      r.expect_end();
    } catch (const ProtocolError& e) {
      throw PeerFailureError(concat("[ps] worker ", options_.rank, ": malformed reply from ", servers_[s]->description(),
                                    " to the attach of shared memory: ", e.what()));
    }
    shm_attached_[s] = yes;
    attached += yes;
  }
  if (attached == 0) shm_.reset();
  return attached;
}

int PsClient::shared_memory_servers() const {
  return static_cast<int>(std::count(shm_attached_.begin(), shm_attached_.end(), true));
}

bool PsClient::through_shm(size_t server) const { return shm_ && server < shm_attached_.size() && shm_attached_[server]; }

void PsClient::initialize(const std::vector<const float*>& values) {
  TESSERA_CHECK(plan_ && values.size() == plan_->specs().size(), "[ps] initialize needs one array per parameter");
  // Chunks of at most 16 MiB, so that a large embedding table fits the message bound.
  constexpr int64_t kChunkBytes = int64_t(16) << 20;
  const auto& pieces = plan_->pieces();
  for (size_t p = 0; p < pieces.size(); ++p) {
    const Piece& piece = pieces[p];
    const int64_t rs = plan_->specs()[piece.param].row_size;
    const int64_t rows_per_chunk = std::max<int64_t>(1, kChunkBytes / (rs * int64_t(sizeof(float))));
    for (int64_t row = piece.row_begin; row < piece.row_end; row += rows_per_chunk) {
      int64_t n = std::min(rows_per_chunk, piece.row_end - row);
      FrameWriter w(uint8_t(PsOp::kInit));
      w.u32(static_cast<uint32_t>(p)).i64(row - piece.row_begin);
      write_floats(w, values[piece.param] + row * rs, static_cast<size_t>(n * rs));
      std::vector<Bytes> frames(servers_.size());
      frames[piece.server] = w.finish();
      expect_ok(round_trip(std::move(frames), "init")[piece.server], piece.server, "init");
    }
  }
  auto replies = round_trip(std::vector<Bytes>(servers_.size(), FrameWriter(uint8_t(PsOp::kInitDone)).finish()), "init");
  for (size_t i = 0; i < replies.size(); ++i) expect_ok(replies[i], i, "init");
}

void PsClient::restore(const std::string& dir, int64_t step) {
  auto replies = round_trip(
      std::vector<Bytes>(servers_.size(), FrameWriter(uint8_t(PsOp::kRestore)).str(dir).i64(step).finish()),
      concat("restore of step ", step));
  for (size_t i = 0; i < replies.size(); ++i) expect_ok(replies[i], i, "restore");
}

void PsClient::save(const std::string& dir, int64_t step) {
  auto replies = round_trip(
      std::vector<Bytes>(servers_.size(), FrameWriter(uint8_t(PsOp::kSave)).str(dir).i64(step).finish()),
      concat("checkpoint of step ", step));
  for (size_t i = 0; i < replies.size(); ++i) expect_ok(replies[i], i, "save");
}

std::vector<std::pair<size_t, size_t>> PsClient::split_rows(const SparseRows& rows) const {
  std::vector<std::pair<size_t, size_t>> ranges(servers_.size(), {0, 0});
  const auto& ids = *rows.ids;
  size_t i = 0;
  while (i < ids.size()) {
    const Piece& piece = plan_->pieces()[plan_->piece_of_row(rows.param, ids[i])];
    size_t j = i;
    while (j < ids.size() && ids[j] < piece.row_end) ++j;
    ranges[piece.server] = {i, j};  // a server holds one contiguous range of each parameter
    i = j;
  }
  return ranges;
}

void PsClient::write_push(int64_t clock, double lr, const std::vector<const float*>& dense_grads,
                          const std::vector<SparseRows>& rows) {
  TESSERA_CHECK(plan_, "[ps] push before register_model");
  const auto& specs = plan_->specs();
  push_frames_.resize(servers_.size());
  std::vector<float> zeros;
  Splits splits;
  for (const auto& r : rows) splits.push_back(split_rows(r));
  for (int s = 0; s < static_cast<int>(servers_.size()); ++s) {
    const bool in_shm = through_shm(static_cast<size_t>(s));
    FrameWriter w(uint8_t(in_shm ? PsOp::kPushShm : PsOp::kPush), std::move(push_frames_[static_cast<size_t>(s)]));
    w.i64(clock).i64(double_bits(lr));
    uint32_t dense = 0;
    for (int p : plan_->pieces_of(s)) dense += !specs[plan_->pieces()[p].param].sparse;
    w.u32(in_shm ? 0 : dense);
    for (int p : plan_->pieces_of(s)) {
      const Piece& piece = plan_->pieces()[p];
      const ParamSpec& spec = specs[piece.param];
      if (spec.sparse) continue;
      const size_t n = static_cast<size_t>(piece.rows() * spec.row_size);
      const float* g = dense_grads[piece.param];
      counters_.dense_bytes_pushed += static_cast<int64_t>(n * sizeof(float));
      if (in_shm) {  // the server reads it from there when it handles this frame
        float* region = shm_->push_region() + plan_->piece_offset(piece);
        const float* from = g ? g + piece.row_begin * spec.row_size : nullptr;
        if (!from) std::fill_n(region, n, 0.0f);
        else if (from != region) std::memcpy(region, from, n * sizeof(float));  // else backward wrote it there
        continue;
      }
      if (!g) zeros.assign(n, 0.0f);
      w.u32(static_cast<uint32_t>(p));
      write_floats(w, g ? g + piece.row_begin * spec.row_size : zeros.data(), n);
    }
    uint32_t m = 0;
    for (const auto& split : splits) m += split[s].second > split[s].first;
    w.u32(m);
    for (size_t k = 0; k < rows.size(); ++k) {
      auto [begin, end] = splits[k][s];
      if (end == begin) continue;
      const int64_t rs = specs[rows[k].param].row_size;
      std::vector<int64_t> ids(rows[k].ids->begin() + begin, rows[k].ids->begin() + end);
      w.u32(static_cast<uint32_t>(rows[k].param));
      write_ids(w, ids);
      write_floats(w, rows[k].grads + begin * rs, (end - begin) * rs);
      counters_.sparse_rows_pushed += static_cast<int64_t>(end - begin);
      counters_.sparse_bytes_pushed += static_cast<int64_t>((end - begin) * (rs * sizeof(float) + sizeof(int64_t)));
    }
    push_frames_[static_cast<size_t>(s)] = w.finish();
  }
}

void PsClient::push(int64_t clock, double lr, const std::vector<const float*>& dense_grads,
                    const std::vector<SparseRows>& rows) {
  write_push(clock, lr, dense_grads, rows);
  const std::string what = concat("push of step ", clock);
  std::vector<Bytes>* requests[] = {&push_frames_};
  std::vector<Bytes>* replies[] = {&push_replies_};
  exchange(requests, replies, what);
  for (size_t i = 0; i < push_replies_.size(); ++i) expect_ok(push_replies_[i], i, what);
}

void PsClient::push_then_pull(int64_t clock, double lr, const std::vector<const float*>& dense_grads,
                              const std::vector<SparseRows>& rows, const std::vector<float*>& dense_out) {
  write_push(clock, lr, dense_grads, rows);
  write_pull(clock + 1, {}, {}, true);
  const std::string what = concat("push of step ", clock, " and pull of step ", clock + 1);
  std::vector<Bytes>* requests[] = {&push_frames_, &pull_frames_};
  std::vector<Bytes>* replies[] = {&push_replies_, &pull_replies_};
  exchange(requests, replies, what);
  for (size_t i = 0; i < push_replies_.size(); ++i) expect_ok(push_replies_[i], i, what);
  read_values(dense_out, {}, {}, what);
}

void PsClient::write_pull(int64_t clock, const std::vector<SparseRows>& rows, const Splits& splits, bool with_dense) {
  TESSERA_CHECK(plan_, "[ps] pull before register_model");
  pull_frames_.resize(servers_.size());
  for (size_t s = 0; s < servers_.size(); ++s) {
    uint32_t m = 0;
    for (const auto& split : splits) m += split[s].second > split[s].first;
    if (!with_dense && m == 0) {
      pull_frames_[s].clear();  // nothing to ask this server
      continue;
    }
    const bool in_shm = with_dense && through_shm(s);
    FrameWriter w(uint8_t(in_shm ? PsOp::kPullShm : PsOp::kPull), std::move(pull_frames_[s]));
    w.i64(clock).u8(with_dense).u32(m);
    for (size_t k = 0; k < rows.size(); ++k) {
      auto [begin, end] = splits[k][s];
      if (end == begin) continue;
      std::vector<int64_t> ids(rows[k].ids->begin() + begin, rows[k].ids->begin() + end);
      w.u32(static_cast<uint32_t>(rows[k].param));
      write_ids(w, ids);
      counters_.sparse_bytes_pulled += static_cast<int64_t>(ids.size() * sizeof(int64_t));
    }
    pull_frames_[s] = w.finish();
  }
}

void PsClient::pull(int64_t clock, const std::vector<float*>& dense_out, const std::vector<SparseRows>& rows,
                    bool with_dense) {
  Splits splits;
  for (const auto& r : rows) splits.push_back(split_rows(r));
  write_pull(clock, rows, splits, with_dense);
  const std::string what = concat("pull of step ", clock);
  std::vector<Bytes>* requests[] = {&pull_frames_};
  std::vector<Bytes>* replies[] = {&pull_replies_};
  exchange(requests, replies, what);
  read_values(dense_out, rows, splits, what);
}

void PsClient::read_values(const std::vector<float*>& dense_out, const std::vector<SparseRows>& rows, const Splits& splits,
                           const std::string& what) {
  const auto& specs = plan_->specs();
  const std::vector<Bytes>& replies = pull_replies_;
  for (size_t s = 0; s < replies.size(); ++s) {
    if (replies[s].empty()) continue;
    const bool in_shm = replies[s][0] == uint8_t(PsReply::kValuesInShm);
    if (!in_shm && replies[s][0] != uint8_t(PsReply::kValues))
      throw PeerFailureError(concat("[ps] worker ", options_.rank, ": ", servers_[s]->description(), " answered ", what,
                                    " with opcode ", int(replies[s][0])));
    try {
      FrameReader r(replies[s].data() + 1, replies[s].size() - 1);
      version_ = r.i64();
      if (in_shm) {
        if (!through_shm(s)) throw ProtocolError("values in shared memory that was never attached");
        for (int p : plan_->pieces_of(static_cast<int>(s))) {
          const Piece& piece = plan_->pieces()[p];
          const int64_t rs = specs[piece.param].row_size;
          if (specs[piece.param].sparse) continue;
          const int64_t n = piece.rows() * rs;
          if (static_cast<size_t>(piece.param) >= dense_out.size()) throw ProtocolError("dense values nobody asked for");
          const float* region = shm_->pull_region() + plan_->piece_offset(piece);
          float* dst = dense_out[static_cast<size_t>(piece.param)];
          if (dst) dst += piece.row_begin * rs;
          // Where the parameters live in the segment (PsWorker), the server wrote them in place.
          if (dst && dst != region) std::memcpy(dst, region, static_cast<size_t>(n) * sizeof(float));
          counters_.dense_bytes_pulled += n * static_cast<int64_t>(sizeof(float));
        }
      }
      uint32_t n = in_shm ? 0 : r.u32();
      for (uint32_t i = 0; i < n; ++i) {
        uint32_t p = r.u32();
        if (p >= plan_->pieces().size() || plan_->pieces()[p].server != static_cast<int>(s))
          throw ProtocolError(concat("values of piece ", p, ", which that server does not hold"));
        const Piece& piece = plan_->pieces()[p];
        const int64_t rs = specs[piece.param].row_size;
        if (static_cast<size_t>(piece.param) >= dense_out.size()) throw ProtocolError("dense values nobody asked for");
        float* dst = dense_out[static_cast<size_t>(piece.param)];
        if (!dst) throw ProtocolError(concat("dense values of sparse parameter ", piece.param));
        read_floats(r, dst + piece.row_begin * rs, static_cast<size_t>(piece.rows() * rs), "pulled values");
        counters_.dense_bytes_pulled += piece.rows() * rs * static_cast<int64_t>(sizeof(float));
      }
      uint32_t m = r.u32();
      size_t k = 0;
      for (uint32_t i = 0; i < m; ++i) {
        while (k < rows.size() && splits[k][s].second == splits[k][s].first) ++k;
        if (k == rows.size()) throw ProtocolError("more row arrays than requested");
        auto [begin, end] = splits[k][s];
        const int64_t rs = specs[rows[k].param].row_size;
        read_floats(r, rows[k].out + begin * rs, (end - begin) * rs, "pulled rows");
        counters_.sparse_rows_pulled += static_cast<int64_t>(end - begin);
        counters_.sparse_bytes_pulled += static_cast<int64_t>((end - begin) * rs * sizeof(float));
        ++k;
      }
      r.expect_end();
    } catch (const ProtocolError& e) {
      throw PeerFailureError(concat("[ps] worker ", options_.rank, ": malformed reply from ", servers_[s]->description(),
                                    " to ", what, ": ", e.what()));
    }
  }
}

void PsClient::done() {
  auto replies = round_trip(std::vector<Bytes>(servers_.size(), FrameWriter(uint8_t(PsOp::kDone)).finish()), "done");
  for (size_t i = 0; i < replies.size(); ++i) expect_ok(replies[i], i, "done");
}

}  // namespace tessera::parallel::ps
