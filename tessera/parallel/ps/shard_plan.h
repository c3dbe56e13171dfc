// How a model's parameters are split over S parameter servers. Every parameter is seen as rows
// (its first dimension; a vector's rows are its elements) of row_size elements, the parameters are
// laid end to end in registration order, and that sequence is cut into S contiguous runs of about
// total/S elements each, at row boundaries. So the servers hold equal shares (within one row) however
// unequal the tensors are, a large tensor is split into row ranges over several servers, and a
// sparse embedding row lives on exactly one server, found by binary search over its ranges.
//
// Workers and servers compute the same plan from the same specs (the worker registers them), so
// the plan itself never travels.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace tessera::parallel::ps {

struct ParamSpec {
  std::string name;
  int64_t rows = 1;
  int64_t row_size = 1;
  bool sparse = false;  // an embedding table: workers pull and push only the rows a batch touches
  int64_t numel() const { return rows * row_size; }
  bool operator==(const ParamSpec&) const = default;
};

// Rows [row_begin, row_end) of parameter `param`, held by `server`.
struct Piece {
  int param = 0;
  int64_t row_begin = 0, row_end = 0;
  int server = 0;
  int64_t rows() const { return row_end - row_begin; }
};

class ShardPlan {
 public:
  ShardPlan(std::vector<ParamSpec> specs, int num_servers);

  const std::vector<ParamSpec>& specs() const { return specs_; }
  const std::vector<Piece>& pieces() const { return pieces_; }  // by parameter, then row
  int num_servers() const { return num_servers_; }
  // Indices into pieces() of the pieces `server` holds, in order.
  const std::vector<int>& pieces_of(int server) const { return by_server_[server]; }
  // The piece holding row `row` of parameter `param` (IndexError outside the parameter).
  int piece_of_row(int param, int64_t row) const;
  int64_t elements_of(int server) const;
  // Dense floats in all (the dense layout's length), and where a dense parameter or piece starts in
  // it (-1 for a sparse one).
  int64_t dense_elements() const { return dense_elements_; }
  int64_t dense_offset(int param) const { return dense_offset_[static_cast<size_t>(param)]; }
  int64_t piece_offset(const Piece& piece) const;

 private:
  std::vector<ParamSpec> specs_;
  int num_servers_;
  std::vector<Piece> pieces_;
  std::vector<std::vector<int>> by_server_;
  std::vector<int> first_piece_;  // per parameter, its first piece (pieces of one parameter are adjacent)
  std::vector<int64_t> dense_offset_;  // per parameter
  int64_t dense_elements_ = 0;
};

}  // namespace tessera::parallel::ps
