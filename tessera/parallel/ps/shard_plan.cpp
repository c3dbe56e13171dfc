#include "tessera/parallel/ps/shard_plan.h"

#include <algorithm>

#include "tessera/core/error.h"

namespace tessera::parallel::ps {

ShardPlan::ShardPlan(std::vector<ParamSpec> specs, int num_servers)
    : specs_(std::move(specs)), num_servers_(num_servers), by_server_(static_cast<size_t>(std::max(num_servers, 0))) {
  TESSERA_CHECK(num_servers >= 1, "[ps] a job needs at least one server, got ", num_servers);
  TESSERA_CHECK(!specs_.empty(), "[ps] the model has no parameters to serve");
  int64_t total = 0;
  for (const auto& s : specs_) {
    TESSERA_CHECK(s.rows >= 1 && s.row_size >= 1, "[ps] parameter '", s.name, "' has shape ", s.rows, "x", s.row_size);
    total += s.numel();
    dense_offset_.push_back(s.sparse ? -1 : dense_elements_);
    if (!s.sparse) dense_elements_ += s.numel();
  }
  const int64_t share = (total + num_servers - 1) / num_servers;
  int server = 0;
  int64_t fill = 0;  // elements given to `server` so far
  for (int p = 0; p < static_cast<int>(specs_.size()); ++p) {
    const ParamSpec& s = specs_[p];
    first_piece_.push_back(static_cast<int>(pieces_.size()));
    int64_t row = 0;
    while (row < s.rows) {
      if (fill >= share && server + 1 < num_servers) {
        ++server;
        fill = 0;
      }
      int64_t take = s.rows - row;
      if (server + 1 < num_servers) take = std::min(take, std::max<int64_t>(1, (share - fill + s.row_size - 1) / s.row_size));
      pieces_.push_back({p, row, row + take, server});
      by_server_[server].push_back(static_cast<int>(pieces_.size()) - 1);
      fill += take * s.row_size;
      row += take;
    }
  }
}

int ShardPlan::piece_of_row(int param, int64_t row) const {
  TESSERA_CHECK_INDEX(param >= 0 && param < static_cast<int>(specs_.size()), "[ps] parameter index ", param,
                      " outside [0, ", specs_.size(), ")");
  TESSERA_CHECK_INDEX(row >= 0 && row < specs_[param].rows, "[ps] row ", row, " of '", specs_[param].name,
                      "' outside [0, ", specs_[param].rows, ")");
  int lo = first_piece_[param];
  int hi = param + 1 < static_cast<int>(first_piece_.size()) ? first_piece_[param + 1] : static_cast<int>(pieces_.size());
  auto it = std::upper_bound(pieces_.begin() + lo, pieces_.begin() + hi, row,
                             [](int64_t r, const Piece& piece) { return r < piece.row_begin; });
  return static_cast<int>(it - pieces_.begin()) - 1;
}

int64_t ShardPlan::piece_offset(const Piece& piece) const {
  const int64_t start = dense_offset(piece.param);
  return start < 0 ? -1 : start + piece.row_begin * specs_[static_cast<size_t>(piece.param)].row_size;
}

int64_t ShardPlan::elements_of(int server) const {
  int64_t n = 0;
  for (int i : by_server_[server]) n += pieces_[i].rows() * specs_[pieces_[i].param].row_size;
  return n;
}

}  // namespace tessera::parallel::ps
