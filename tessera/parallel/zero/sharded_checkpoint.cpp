#include "tessera/parallel/zero/sharded_checkpoint.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "tessera/autograd/grad_mode.h"
#include "tessera/io/atomic_file.h"
#include "tessera/io/safetensors.h"
#include "tessera/ops/ops.h"

namespace tessera::parallel::zero {

namespace fs = std::filesystem;
using tessera::detail::concat;

namespace {

constexpr const char* kFormat = "tessera-zero-sharded";
constexpr int kVersion = 1;

std::string shard_name(int rank, int world) { return concat("shard-", rank, "-of-", world, ".safetensors"); }

std::string piece_key(const std::string& name) { return "tessera.zero.piece." + name; }

// The buffers' names per parameter index, from an optimizer's "<index>.<buffer>" keys.
std::map<size_t, std::map<std::string, Tensor>> buffers_by_parameter(const nn::StateDict& state) {
  std::map<size_t, std::map<std::string, Tensor>> out;
  for (const auto& [key, t] : state) {
    const size_t dot = key.find('.');
    if (key == "step" || key == "lr" || dot == std::string::npos) continue;
    out[std::stoul(key.substr(0, dot))][key.substr(dot + 1)] = t;
  }
  return out;
}

// What index.json says.
struct Index {
  int world = 0, stage = 0;
  std::vector<std::string> names;
  std::vector<Shape> shapes;
  std::vector<std::string> buffers;  // the optimizer's per-parameter buffers
  int64_t step = 0;
  double lr = 0;
  std::vector<std::string> shards;
};

Index read_index(const std::string& dir) {
  const std::string path = (fs::path(dir) / "index.json").string();
  if (!fs::exists(path))
    throw IoError(concat("[zero] ", dir, " has no index.json: not a sharded checkpoint, or its save was interrupted "
                         "before every rank had written"));
  Index index;
  try {
    const auto j = nlohmann::json::parse(io::read_file(path));
    if (j.at("format") != kFormat || j.at("version") != kVersion)
      throw IoError(concat("[zero] ", path, " is not a version-", kVersion, " ", kFormat, " index"));
    index.world = j.at("world"), index.stage = j.at("stage");
    for (const auto& p : j.at("parameters")) {
      index.names.push_back(p.at("name"));
      index.shapes.push_back(p.at("shape").get<Shape>());
    }
    index.buffers = j.at("optimizer").at("buffers").get<std::vector<std::string>>();
    index.step = j.at("optimizer").at("step"), index.lr = j.at("optimizer").at("lr");
    index.shards = j.at("shards").get<std::vector<std::string>>();
  } catch (const nlohmann::json::exception& e) {
    throw IoError(concat("[zero] ", path, " is malformed: ", e.what()));
  }
  if (index.world < 1 || static_cast<int>(index.shards.size()) != index.world)
    throw IoError(concat("[zero] ", path, " lists ", index.shards.size(), " shards for a world of ", index.world));
  return index;
}

// One shard file, checked against the index.
struct Shard {
  std::map<std::string, Tensor> tensors;
  std::vector<std::pair<int64_t, int64_t>> ranges;  // per parameter of the index: [begin, end)
};

Shard read_shard(const std::string& dir, const Index& index, int rank) {
  const std::string path = (fs::path(dir) / index.shards[static_cast<size_t>(rank)]).string();
  io::SafetensorsFile file = io::load_safetensors(path);
  auto meta = [&](const std::string& key) -> const std::string& {
    auto it = file.metadata.find(key);
    if (it == file.metadata.end()) throw IoError(concat("[zero] ", path, " has no metadata '", key, "'"));
    return it->second;
  };
  if (meta("tessera.zero.rank") != std::to_string(rank) || meta("tessera.zero.world") != std::to_string(index.world))
    throw IoError(concat("[zero] ", path, " was written by rank ", meta("tessera.zero.rank"), " of ",
                         meta("tessera.zero.world"), ", but the index expects rank ", rank, " of ", index.world));
  Shard shard;
  for (auto& [name, t] : file.tensors) shard.tensors[name] = t;
  for (size_t i = 0; i < index.names.size(); ++i) {
    long long begin = -1, end = -1;
    const std::string& text = meta(piece_key(index.names[i]));
    if (std::sscanf(text.c_str(), "%lld %lld", &begin, &end) != 2 || begin < 0 || end < begin ||
        end > shape_numel(index.shapes[i]))
      throw IoError(concat("[zero] ", path, ": piece of ", index.names[i], " is '", text, "', not a range within its ",
                           shape_numel(index.shapes[i]), " elements"));
    shard.ranges.emplace_back(begin, end);
  }
  return shard;
}

// The 1-D tensor `name` of a shard, which must hold `count` elements (absent only when count is 0).
Tensor shard_tensor(const Shard& shard, const std::string& name, int64_t count, const std::string& dir, int rank) {
  auto it = shard.tensors.find(name);
  if (it == shard.tensors.end()) {
    if (count == 0) return {};
    throw IoError(concat("[zero] shard ", rank, " in ", dir, " has no tensor '", name, "'"));
  }
  if (it->second.numel() != count || it->second.dtype() != DType::Float32)
    throw IoError(concat("[zero] shard ", rank, " in ", dir, ": '", name, "' holds ", it->second.numel(), " ",
                         dtype_name(it->second.dtype()), " elements, the piece's range ", count, " float32"));
  return it->second.contiguous().view({count});
}

// Copies the overlap of source range [sb, se) (held by `source`) and destination range [db, de)
// (held by `destination`) of one parameter.
void copy_overlap(const Tensor& source, int64_t sb, int64_t se, Tensor destination, int64_t db, int64_t de) {
  const int64_t lo = std::max(sb, db), hi = std::min(se, de);
  if (lo >= hi) return;
  Tensor dst = destination.slice(0, lo - db, hi - db);
  copy_(dst, source.slice(0, lo - sb, hi - sb));
}

}  // namespace

void save_sharded(ZeroDataParallel& zero, const optim::Optimizer& optimizer, const std::string& dir) {
  autograd::NoGradGuard no_grad;
  auto& group = *zero.group();
  const int rank = group.rank(), world = group.size();
  const nn::StateDict params = zero.module().named_parameters();
  const nn::StateDict state = optimizer.state_dict();
  auto buffers = buffers_by_parameter(state);
  std::set<std::string> buffer_names;
  for (const auto& [i, named] : buffers)
    for (const auto& [name, t] : named) buffer_names.insert(name);
  nn::StateDict tensors;
  io::Metadata metadata{{"tessera.zero.rank", std::to_string(rank)}, {"tessera.zero.world", std::to_string(world)}};
  for (size_t i = 0; i < params.size(); ++i) {
    const Piece piece = zero.piece(i);
    metadata[piece_key(params[i].first)] = concat(piece.begin, " ", piece.end);
    if (piece.size() == 0) continue;
    tensors.emplace_back(params[i].first, zero.parameters()[i]);
    for (const auto& [name, t] : buffers[i]) tensors.emplace_back("optimizer/" + params[i].first + "/" + name, t);
  }
  if (rank == 0)
    for (const auto& [name, t] : zero.module().named_buffers()) tensors.emplace_back("buffer/" + name, t);
  fs::create_directories(dir);
  io::save_safetensors((fs::path(dir) / shard_name(rank, world)).string(), tensors, metadata);
  group.blocking_barrier();  // every shard in place before the index says so
  if (rank == 0) {
    nlohmann::json j{{"format", kFormat}, {"version", kVersion}, {"world", world}, {"stage", zero.stage()}};
    j["parameters"] = nlohmann::json::array();
    for (const auto& [name, p] : params) j["parameters"].push_back({{"name", name}, {"shape", p.shape()}});
    double lr = optimizer.lr();
    int64_t step = optimizer.step_count();
    j["optimizer"] = {{"step", step}, {"lr", lr}, {"buffers", std::vector<std::string>(buffer_names.begin(), buffer_names.end())}};
    std::vector<std::string> shards;
    for (int r = 0; r < world; ++r) shards.push_back(shard_name(r, world));
    j["shards"] = shards;
    io::write_file_atomic((fs::path(dir) / "index.json").string(), j.dump(1));
  }
  group.blocking_barrier();  // the save is complete on return everywhere
}

void load_sharded(ZeroDataParallel& zero, optim::Optimizer& optimizer, const std::string& dir) {
  autograd::NoGradGuard no_grad;
  const Index index = read_index(dir);
  const nn::StateDict params = zero.module().named_parameters();
  if (params.size() != index.names.size())
    throw IoError(concat("[zero] ", dir, " holds ", index.names.size(), " parameters, the model ", params.size()));
  for (size_t i = 0; i < params.size(); ++i)
    if (params[i].first != index.names[i] || params[i].second.shape() != index.shapes[i])
      throw IoError(concat("[zero] ", dir, ": parameter ", i, " is ", index.names[i], " ", shape_str(index.shapes[i]),
                           " there but ", params[i].first, " ", shape_str(params[i].second.shape()), " in the model"));
  // This rank's pieces of the optimizer's buffers, filled from every shard's overlapping ranges.
  std::vector<std::map<std::string, Tensor>> mine(params.size());
  for (size_t i = 0; i < params.size(); ++i)
    for (const std::string& name : index.buffers) mine[i][name] = zeros({zero.piece(i).size()});
  for (int r = 0; r < index.world; ++r) {
    const Shard shard = read_shard(dir, index, r);  // one shard in memory at a time
    for (size_t i = 0; i < params.size(); ++i) {
      const auto [sb, se] = shard.ranges[i];
      const Piece piece = zero.piece(i);
      if (std::max(sb, piece.begin) >= std::min(se, piece.end)) continue;
      copy_overlap(shard_tensor(shard, params[i].first, se - sb, dir, r), sb, se, zero.parameters()[i], piece.begin,
                   piece.end);
      for (const std::string& name : index.buffers)
        copy_overlap(shard_tensor(shard, "optimizer/" + params[i].first + "/" + name, se - sb, dir, r), sb, se,
                     mine[i][name], piece.begin, piece.end);
    }
    if (r == 0) {
      for (const auto& [name, t] : zero.module().named_buffers()) {
        auto it = shard.tensors.find("buffer/" + name);
        if (it == shard.tensors.end()) throw IoError(concat("[zero] shard 0 in ", dir, " has no buffer ", name));
        Tensor dst = t;
        copy_(dst, it->second);
      }
    }
  }
  nn::StateDict state{{"step", from_vector(std::vector<int64_t>{index.step}, {})},
                      {"lr", from_vector(std::vector<float>{static_cast<float>(index.lr)}, {})}};
  for (size_t i = 0; i < params.size(); ++i)
    for (const auto& [name, t] : mine[i]) state.emplace_back(concat(i, ".", name), t);
  optimizer.load_state_dict(state);
  zero.publish_pieces();
}

std::pair<nn::StateDict, nn::StateDict> consolidate_sharded(const std::string& dir) {
  autograd::NoGradGuard no_grad;
  const Index index = read_index(dir);
  std::vector<Tensor> values;
  std::vector<std::map<std::string, Tensor>> buffers(index.names.size());
  for (size_t i = 0; i < index.names.size(); ++i) {
    values.push_back(zeros({shape_numel(index.shapes[i])}));
    for (const std::string& name : index.buffers) buffers[i][name] = zeros({shape_numel(index.shapes[i])});
  }
  std::vector<int64_t> covered(index.names.size(), 0);
  nn::StateDict model_buffers;
  for (int r = 0; r < index.world; ++r) {
    const Shard shard = read_shard(dir, index, r);
    for (size_t i = 0; i < index.names.size(); ++i) {
      const auto [sb, se] = shard.ranges[i];
      if (se == sb) continue;
      covered[i] += se - sb;
      copy_overlap(shard_tensor(shard, index.names[i], se - sb, dir, r), sb, se, values[i], 0, values[i].numel());
      for (const std::string& name : index.buffers)
        copy_overlap(shard_tensor(shard, "optimizer/" + index.names[i] + "/" + name, se - sb, dir, r), sb, se,
                     buffers[i][name], 0, values[i].numel());
    }
    if (r == 0)
      for (const auto& [name, t] : shard.tensors)
        if (name.rfind("buffer/", 0) == 0) model_buffers.emplace_back(name.substr(7), clone(t));
  }
  nn::StateDict model, optimizer{{"step", from_vector(std::vector<int64_t>{index.step}, {})},
                                 {"lr", from_vector(std::vector<float>{static_cast<float>(index.lr)}, {})}};
  for (size_t i = 0; i < index.names.size(); ++i) {
    if (covered[i] != shape_numel(index.shapes[i]))
      throw IoError(concat("[zero] the shards in ", dir, " cover ", covered[i], " of the ", shape_numel(index.shapes[i]),
                           " elements of ", index.names[i]));
    model.emplace_back(index.names[i], values[i].view(index.shapes[i]));
    for (const auto& [name, t] : buffers[i]) optimizer.emplace_back(concat(i, ".", name), t.view(index.shapes[i]));
  }
  for (auto& b : model_buffers) model.push_back(std::move(b));
  return {model, optimizer};
}

}  // namespace tessera::parallel::zero
