#include "tessera/parallel/ddp/distributed_data_parallel.h"

#include <cstring>

#include "tessera/autograd/grad_mode.h"
#include "tessera/core/error.h"
#include "tessera/ops/ops.h"

namespace tessera::parallel::ddp {

using tessera::detail::concat;

namespace {

// "name [shape] dtype" per parameter, one line each: what must agree across ranks.
std::string describe(const nn::StateDict& parameters) {
  std::string s;
  for (const auto& [name, p] : parameters) s += concat(name, " ", shape_str(p.shape()), " ", dtype_name(p.dtype()), "\n");
  return s;
}

// `text` packed into int64 words (for an allgather), and back.
Tensor pack(const std::string& text) {
  int64_t words = static_cast<int64_t>((text.size() + 7) / 8);
  Tensor t = zeros({words}, DType::Int64);
  std::memcpy(t.raw_data(), text.data(), text.size());
  return t;
}

std::string first_line_difference(const std::string& a, const std::string& b) {
  size_t start = 0;
  while (true) {
    size_t ea = a.find('\n', start), eb = b.find('\n', start);
    std::string la = ea == std::string::npos ? a.substr(start) : a.substr(start, ea - start);
    std::string lb = eb == std::string::npos ? b.substr(start) : b.substr(start, eb - start);
    if (la != lb) return concat("'", la.empty() ? "(none)" : la, "' vs '", lb.empty() ? "(none)" : lb, "'");
    if (ea == std::string::npos || eb == std::string::npos) return "(lengths differ)";
    start = ea + 1;
  }
}

}  // namespace

DistributedDataParallel::DistributedDataParallel(std::shared_ptr<nn::Module> module, dist::ProcessGroupPtr group,
                                                 DdpOptions options)
    : module_(std::move(module)), group_(std::move(group)), options_(std::move(options)) {
  TESSERA_CHECK(module_ != nullptr, "[DistributedDataParallel] module is null");
  TESSERA_CHECK(group_ != nullptr, "[DistributedDataParallel] process group is null");
  check_same_model();
  if (options_.broadcast_initial_state) broadcast_state(0, /*with_parameters=*/true);  // every replica starts from rank 0's values
  ReducerOptions reducer;
  reducer.bucket_cap_bytes = options_.bucket_cap_bytes;
  reducer.first_bucket_cap_bytes = options_.first_bucket_cap_bytes;
  reducer.find_unused_parameters = options_.find_unused_parameters;
  // Parameters on a device the backend does not take (a GPU under gloo, tcp or shm) are reduced through
  // the buckets in host memory: their gradients are copied in and the averages copied back, so a
  // .grad on the device cannot be a view of its slot.
  bool backend_takes_parameters = true;
  for (auto& [name, p] : module_->named_parameters()) backend_takes_parameters &= group_->takes(p.device());
  reducer.gradient_as_bucket_view = options_.gradient_as_bucket_view && backend_takes_parameters;
  nn::StateDict trainable;
  for (auto& [name, p] : module_->named_parameters())
    if (p.requires_grad() && !options_.ignored_parameters.contains(name)) trainable.emplace_back(name, p);
  reducer_ = Reducer::create(std::move(trainable), group_, reducer, make_comm_hook(options_.comm_hook, options_.comm_hook_options));
}

void DistributedDataParallel::check_same_model() {
  // Every rank's description (names, shapes, dtypes): their lengths in one small allgather, then
  // the texts, so that a mismatch names the first parameter that differs.
  std::string mine = describe(module_->named_parameters()) + describe(module_->named_buffers());
  int world = group_->size();
  Tensor length = Tensor::empty({1}, DType::Int64);
  length.data<int64_t>()[0] = static_cast<int64_t>(mine.size());
  Tensor lengths = zeros({world}, DType::Int64);
  group_->allgather(length, lengths)->wait();
  std::vector<int64_t> counts;
  for (int r = 0; r < world; ++r) counts.push_back((lengths.data<int64_t>()[r] + 7) / 8);
  int64_t total = 0;
  for (int64_t c : counts) total += c;
  Tensor all = zeros({total}, DType::Int64);
  group_->allgather(pack(mine), all, counts)->wait();
  const char* base = static_cast<const char*>(all.raw_data());
  std::string reference(base, static_cast<size_t>(lengths.data<int64_t>()[0]));
  int64_t offset = counts[0];
  for (int r = 1; r < world; ++r) {
    std::string theirs(base + offset * 8, static_cast<size_t>(lengths.data<int64_t>()[r]));
    offset += counts[static_cast<size_t>(r)];
    if (theirs != reference)
      throw ValueError(concat("[DistributedDataParallel] rank ", r, "'s model differs from rank 0's: ",
                              first_line_difference(reference, theirs),
                              ". Every rank must build the same model (same layers, names and shapes)"));
  }
}

void DistributedDataParallel::broadcast_buffers() { broadcast_state(0, /*with_parameters=*/false); }

void DistributedDataParallel::broadcast_state(int source, bool with_parameters) {
  std::vector<dist::WorkPtr> works;
  // A tensor on a device the backend does not take travels as a host copy, written back after.
  std::vector<std::pair<Tensor, Tensor>> staged;  // (the tensor, its host copy)
  auto send = [&](const Tensor& t) {
    if (group_->takes(t.device())) {
      works.push_back(group_->broadcast(t, source));
      return;
    }
    Tensor host = t.cpu();
    works.push_back(group_->broadcast(host, source));
    staged.emplace_back(t, host);
  };
  if (with_parameters)
    for (auto& [name, p] : module_->named_parameters())
      if (!options_.ignored_parameters.contains(name)) send(p);
  for (auto& [name, b] : module_->named_buffers()) send(b);
  for (auto& w : works) w->wait();
  autograd::NoGradGuard no_grad;
  for (auto& [t, host] : staged) {
    Tensor destination = t;
    copy_(destination, host);
  }
}

Tensor DistributedDataParallel::forward(const Tensor& input) {
  const bool distributed_training = module_->is_training() && group_->size() > 1;
  if (distributed_training && options_.uneven_inputs) {
    auto [active, synchronising] = count_active(true, reducer_->sync());
    if (synchronising > 0) reducer_->set_contributing_ranks(static_cast<int>(active));
    ++active_iterations_;
  }
  if (options_.broadcast_buffers && distributed_training) broadcast_buffers();
  return module_->forward(input);
}

std::pair<int64_t, int64_t> DistributedDataParallel::count_active(bool active, bool synchronising) {
  Tensor t = Tensor::empty({2}, DType::Int64);
  t.data<int64_t>()[0] = active ? 1 : 0;
  t.data<int64_t>()[1] = synchronising ? 1 : 0;
  group_->blocking_allreduce(t, dist::ReduceOp::Sum);
  return {t.data<int64_t>()[0], t.data<int64_t>()[1]};
}

int64_t DistributedDataParallel::join() {
  if (group_->size() == 1) return 0;
  TESSERA_CHECK(options_.uneven_inputs, "[DistributedDataParallel] join() needs DdpOptions::uneven_inputs = true, "
                                        "so that every forward counts the ranks still active");
  TESSERA_CHECK(module_->is_training(), "[DistributedDataParallel] join() is for training; the module is in eval mode");
  int64_t shadowed = 0;
  while (true) {
    // Mirrors forward() then backward() of the ranks still active.
    auto [active, synchronising] = count_active(false, false);
    if (active == 0) break;
    if (options_.broadcast_buffers) broadcast_buffers();
    if (synchronising > 0) reducer_->shadow_iteration();
    ++shadowed;
  }
  sync_final_model();
  return shadowed;
}

void DistributedDataParallel::sync_final_model() {
  // The rank with the most iterations (the highest such rank on a tie) holds the final model.
  Tensor t = Tensor::empty({1}, DType::Int64);
  t.data<int64_t>()[0] = active_iterations_ * group_->size() + group_->rank();
  group_->blocking_allreduce(t, dist::ReduceOp::Max);
  broadcast_state(static_cast<int>(t.data<int64_t>()[0] % group_->size()), /*with_parameters=*/true);
}

}  // namespace tessera::parallel::ddp
