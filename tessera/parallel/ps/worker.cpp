#include "tessera/parallel/ps/worker.h"

#include <algorithm>
#include <cstring>
#include <functional>

#include "tessera/core/error.h"
#include "tessera/core/storage.h"

namespace tessera::parallel::ps {

namespace {

void collect_bags(const std::shared_ptr<nn::Module>& module, std::vector<std::shared_ptr<nn::EmbeddingBag>>& out) {
  if (auto bag = std::dynamic_pointer_cast<nn::EmbeddingBag>(module)) out.push_back(bag);
  for (const auto& [name, child] : module->children()) collect_bags(child, out);
}

}  // namespace

PsWorker::PsWorker(std::shared_ptr<nn::Module> model, ClientOptions options)
    : model_(std::move(model)), options_(options), client_(std::move(options)) {
  std::vector<std::shared_ptr<nn::EmbeddingBag>> bags;
  collect_bags(model_, bags);
  for (const auto& [name, p] : model_->named_parameters()) {
    TESSERA_CHECK(p.dtype() == DType::Float32 && p.is_contiguous(), "[ps] parameter '", name,
                  "' must be contiguous float32");
    ParamSpec spec;
    spec.name = name;
    spec.rows = p.dim() == 0 ? 1 : p.shape()[0];
    spec.row_size = p.dim() == 0 ? 1 : p.numel() / spec.rows;
    std::shared_ptr<nn::EmbeddingBag> owner;
    for (const auto& bag : bags)
      if (bag->weight.impl() == p.impl()) owner = bag;
    spec.sparse = owner != nullptr;
    specs_.push_back(spec);
    params_.push_back(p);
    bags_.push_back(owner);
  }
  // The row source: forward asks the servers for exactly the rows of its batch.
  for (size_t i = 0; i < bags_.size(); ++i) {
    if (!bags_[i]) continue;
    const int param = static_cast<int>(i);
    const int64_t row_size = specs_[i].row_size;
    bags_[i]->set_row_source([this, param, row_size](const std::vector<int64_t>& ids) {
      Tensor rows = Tensor::empty({static_cast<int64_t>(ids.size()), row_size});
      client_.pull(clock_, {}, {SparseRows{param, &ids, nullptr, rows.data<float>()}}, false);
      return rows;
    });
  }
}

PsWorker::~PsWorker() {
  for (auto& bag : bags_)
    if (bag) bag->set_row_source(nullptr);
}

void PsWorker::start(int64_t start_step, const std::string& restore_dir) {
  clock_ = start_step;
  client_.register_model(specs_, start_step);
  client_.attach_shared_memory();
  bind_to_shared_memory();
  if (options_.rank == 0) {
    if (!restore_dir.empty()) {
      client_.restore(restore_dir, start_step);
    } else {
      std::vector<const float*> values;
      for (const auto& p : params_) values.push_back(p.data<float>());
      client_.initialize(values);
    }
  }
  pull_dense();
}

void PsWorker::bind_to_shared_memory() {
  const std::shared_ptr<ShmChannel>& channel = client_.shared_memory();
  if (!channel) return;
  const ShardPlan& plan = client_.plan();
  const size_t bytes = static_cast<size_t>(plan.dense_elements()) * sizeof(float);
  // Each region is one Storage that keeps the mapping alive while any tensor views it (the model may
  // outlive this worker).
  auto values = Storage::wrap(channel->pull_region(), bytes, cpu_device(), [channel] {});
  auto grads = Storage::wrap(channel->push_region(), bytes, cpu_device(), [channel] {});
  for (size_t i = 0; i < params_.size(); ++i) {
    if (specs_[i].sparse) continue;
    const int64_t offset = plan.dense_offset(static_cast<int>(i));
    std::memcpy(channel->pull_region() + offset, params_[i].data<float>(), static_cast<size_t>(params_[i].numel()) * sizeof(float));
    rebind_storage(params_[i], values, offset);  // the layers' handles now read the segment
    params_[i].set_grad_buffer(view_of_storage(grads, params_[i].shape(), offset));
  }
}

std::vector<float*> PsWorker::dense_values() {
  std::vector<float*> out;
  for (size_t i = 0; i < params_.size(); ++i) out.push_back(specs_[i].sparse ? nullptr : params_[i].data<float>());
  return out;
}

void PsWorker::dense_values_changed() {
  for (size_t i = 0; i < params_.size(); ++i)
    if (!specs_[i].sparse) params_[i].impl()->storage->bump_version();
}

void PsWorker::pull_dense() {
  client_.pull(clock_, dense_values(), {}, true);
  dense_values_changed();
}

void PsWorker::step(double lr) {
  std::vector<const float*> grads;
  std::vector<Tensor> keep;  // contiguous copies live until the push is sent
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor g = specs_[i].sparse ? Tensor() : params_[i].grad();
    if (g.defined()) {
      keep.push_back(g.contiguous());
      grads.push_back(keep.back().data<float>());
    } else {
      grads.push_back(nullptr);
    }
  }
  std::vector<SparseRows> rows;
  for (size_t i = 0; i < bags_.size(); ++i) {
    if (!bags_[i] || !bags_[i]->last_rows().defined()) continue;
    Tensor g = bags_[i]->last_rows().grad();
    if (!g.defined()) continue;
    keep.push_back(g.contiguous());
    rows.push_back(SparseRows{static_cast<int>(i), &bags_[i]->last_ids(), keep.back().data<float>(), nullptr});
  }
  client_.push_then_pull(clock_, lr, grads, rows, dense_values());
  ++clock_;
  dense_values_changed();
}

void PsWorker::refresh() { pull_dense(); }

void PsWorker::pull_sparse_tables() {
  constexpr int64_t kRowsPerPull = 1 << 18;  // bounds each reply (256k rows of 32 floats: 32 MiB)
  for (size_t i = 0; i < bags_.size(); ++i) {
    if (!bags_[i]) continue;
    const int64_t rows = specs_[i].rows, row_size = specs_[i].row_size;
    for (int64_t begin = 0; begin < rows; begin += kRowsPerPull) {
      std::vector<int64_t> ids(static_cast<size_t>(std::min(kRowsPerPull, rows - begin)));
      for (size_t k = 0; k < ids.size(); ++k) ids[k] = begin + static_cast<int64_t>(k);
      client_.pull(clock_, {}, {SparseRows{static_cast<int>(i), &ids, nullptr, params_[i].data<float>() + begin * row_size}},
                   false);
    }
    params_[i].impl()->storage->bump_version();
  }
}

void PsWorker::finish() {
  if (finished_) return;
  finished_ = true;
  client_.done();
}

}  // namespace tessera::parallel::ps
