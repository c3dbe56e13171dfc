#include "tessera/parallel/zero/sharded_checkpoint.h"

#include "tessera/autograd/grad_mode.h"
#include "tessera/ops/ops.h"

namespace tessera::parallel::zero {

using tessera::detail::concat;

namespace {

const std::string kModel = io::kModelTensors, kOptimizer = io::kOptimizerTensors;

// "<buffer>" -> tensor of parameter i's optimizer state, from an optimizer's "<i>.<buffer>" keys.
std::vector<std::pair<std::string, Tensor>> buffers_of(const nn::StateDict& state, size_t i) {
  const std::string prefix = concat(i, ".");
  std::vector<std::pair<std::string, Tensor>> out;
  for (const auto& [key, t] : state)
    if (key.rfind(prefix, 0) == 0) out.emplace_back(key.substr(prefix.size()), t);
  return out;
}

}  // namespace

std::vector<io::SavePiece> sharded_pieces(ZeroDataParallel& zero, const optim::Optimizer& optimizer) {
  const nn::StateDict params = zero.module().named_parameters();
  const nn::StateDict state = optimizer.state_dict();
  std::vector<io::SavePiece> pieces;
  for (size_t i = 0; i < params.size(); ++i) {
    const Piece piece = zero.piece(i);
    if (piece.size() == 0) continue;
    const Shape& shape = params[i].second.shape();
    const io::Region region = io::Region::flat_range(piece.begin, piece.end);
    pieces.push_back({kModel + params[i].first, shape, region, zero.parameters()[i]});
    for (const auto& [buffer, t] : buffers_of(state, i))
      pieces.push_back({concat(kOptimizer, i, ".", buffer), shape, region, t});
  }
  if (zero.group()->rank() == 0) {
    for (const auto& [name, t] : zero.module().named_buffers())
      pieces.push_back({kModel + name, t.shape(), io::Region::whole(t.shape()), t});
    for (const auto& [key, t] : state)
      if (key.find('.') == std::string::npos)  // the scalars: step, lr
        pieces.push_back({kOptimizer + key, t.shape(), io::Region::whole(t.shape()), t});
  }
  return pieces;
}

std::vector<std::string> sharded_order(ZeroDataParallel& zero) {
  std::vector<std::string> order;
  for (const auto& [name, t] : zero.module().state_dict()) order.push_back(kModel + name);
  return order;
}

void load_pieces(ZeroDataParallel& zero, optim::Optimizer& optimizer, io::PieceReader& reader) {
  autograd::NoGradGuard no_grad;
  const nn::StateDict params = zero.module().named_parameters();
  nn::StateDict state;
  for (const std::string& name : reader.names_with_prefix(kOptimizer))
    if (name.find('.') == std::string::npos) state.emplace_back(name.substr(kOptimizer.size()), reader.read_whole(name));
  for (size_t i = 0; i < params.size(); ++i) {
    const auto& [name, value] = params[i];
    const io::LogicalTensor& saved = reader.tensor(kModel + name);
    if (saved.shape != value.shape())
      throw IoError(concat("[zero] ", reader.dir(), " holds ", name, " as ", shape_str(saved.shape), ", the model as ",
                           shape_str(value.shape())));
    const Piece piece = zero.piece(i);
    const io::Region region = io::Region::flat_range(piece.begin, piece.end);
    Tensor mine = zero.parameters()[i];
    copy_(mine, reader.read(kModel + name, region).view(mine.shape()));
    const std::string buffers = concat(kOptimizer, i, ".");
    for (const std::string& buffer : reader.names_with_prefix(buffers))
      state.emplace_back(concat(i, ".", buffer.substr(buffers.size())), reader.read(buffer, region));
  }
  for (const auto& [name, t] : zero.module().named_buffers()) {
    Tensor dst = t;
    copy_(dst, reader.read_whole(kModel + name));
  }
  optimizer.load_state_dict(state);
  zero.publish_pieces();
}

void save_sharded(ZeroDataParallel& zero, const optim::Optimizer& optimizer, const std::string& dir) {
  auto& group = *zero.group();
  io::write_rank_pieces(dir, group.rank(), group.size(), sharded_pieces(zero, optimizer));
  group.blocking_barrier();  // every rank's pieces in place before the manifest says so
  if (group.rank() == 0) io::write_manifest(dir, group.size(), sharded_order(zero));
  group.blocking_barrier();  // the save is complete on return everywhere
}

void load_sharded(ZeroDataParallel& zero, optim::Optimizer& optimizer, const std::string& dir) {
  io::PieceReader reader(dir);
  load_pieces(zero, optimizer, reader);
}

}  // namespace tessera::parallel::zero
