// The search space of `tessera tune`: config keys and how to draw their values, from a TOML file
// whose tables are the keys (Ray Tune's loguniform, uniform, randint, choice, grid_search):
//
//   [optimizer.lr]
//   log_uniform = [1e-4, 1.0]         # or uniform = [a, b], int = [a, b] (inclusive), choice = [...]
//   grid = [0.001, 0.01, 0.1, 1.0]    # the values --grid tries (a choice's grid is its choices)
//
// A trial is a list of "section.key=value" assignments, applied as `tessera train --set` applies them.
#pragma once
#include <random>
#include <string>
#include <vector>

namespace tessera::tune {

struct Dimension {
  enum class Kind { LogUniform, Uniform, Int, Choice } kind = Kind::Uniform;
  std::string key;                  // "optimizer.lr"
  double low = 0, high = 0;         // LogUniform, Uniform, Int
  std::vector<std::string> values;  // Choice: the choices (as TOML values)
  std::vector<std::string> grid;    // what --grid tries
};

// ValueError naming the key for an unknown config key, a bad range or an empty choice.
std::vector<Dimension> parse_search_space(const std::string& toml_text, const std::string& source);

std::vector<std::string> sample_trial(const std::vector<Dimension>& space, std::mt19937_64& rng);
// Every combination of the dimensions' grids, the first dimension slowest.
std::vector<std::vector<std::string>> grid_trials(const std::vector<Dimension>& space);

}  // namespace tessera::tune
