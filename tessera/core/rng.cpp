#include "tessera/core/rng.h"

#include <cmath>
#include <sstream>

#include "tessera/core/error.h"

namespace tessera {

float Generator::normal() {
  // Box-Muller, keeping the second value for the next call.
  if (has_spare_) {
    has_spare_ = false;
    return spare_;
  }
  double u1 = ((engine_() >> 11) + 1.0) * (1.0 / 9007199254740993.0);  // (0, 1]
  double u2 = (engine_() >> 11) * (1.0 / 9007199254740992.0);
  double r = std::sqrt(-2.0 * std::log(u1));
  spare_ = static_cast<float>(r * std::sin(2 * M_PI * u2));
  has_spare_ = true;
  return static_cast<float>(r * std::cos(2 * M_PI * u2));
}

std::string Generator::state() const {
  std::ostringstream out;
  out << engine_ << ' ' << has_spare_ << ' ';
  out.precision(9);
  out << spare_;
  return out.str();
}

void Generator::set_state(const std::string& state) {
  std::istringstream in(state);
  std::mt19937_64 engine;
  bool has_spare = false;
  float spare = 0;
  in >> engine >> has_spare >> spare;
  if (in.fail()) throw ValueError("[Generator::set_state] malformed generator state");
  engine_ = engine;
  has_spare_ = has_spare;
  spare_ = spare;
}

Generator& default_generator() {
  static Generator g(0);
  return g;
}

void manual_seed(uint64_t seed) { default_generator().seed(seed); }

}  // namespace tessera
