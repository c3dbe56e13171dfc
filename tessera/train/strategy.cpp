#include "tessera/train/strategy.h"

namespace tessera::train {

std::vector<io::SavePiece> Strategy::checkpoint_pieces(const optim::Optimizer& optimizer) {
  nn::StateDict model = model_state();                 // collective where the strategy splits the model
  nn::StateDict state = optimizer_state(optimizer);    // likewise
  if (rank() != 0) return {};
  return io::whole_state_pieces(model, state);
}

void Strategy::load_pieces(io::PieceReader& reader, optim::Optimizer& optimizer) {
  const io::WholeState whole = io::read_whole_state(reader);
  load_model_state(whole.model);
  load_optimizer_state(optimizer, whole.optimizer);
}

}  // namespace tessera::train
