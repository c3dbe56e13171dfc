#include "tessera/serve/local_backend.h"

#include <nlohmann/json.hpp>

#include "tessera/core/error.h"
#include "tessera/ops/ops.h"

namespace tessera::serve {

InputSpec input_spec_of(const Predictor& p) {
  InputSpec s;
  s.sample_shape = p.sample_shape();
  s.dtype = p.input_dtype();
  s.id_bound = p.id_bound();
  s.description = p.describe_input();
  return s;
}

LocalBackend::LocalBackend(std::string checkpoint, BatcherOptions batching, RequestLimits limits,
                           ServeMetrics& metrics, std::chrono::milliseconds request_timeout)
    : checkpoint_(std::move(checkpoint)),
      limits_(limits),
      request_timeout_(request_timeout),
      predictor_(Predictor::load(checkpoint_)),
      spec_(input_spec_of(*predictor_)),
      batcher_(batching, [this](const Tensor& batch) { return predictor()->predict(batch); },
               [&metrics](int64_t samples) { metrics.batch_done(samples); }) {}

std::shared_ptr<Predictor> LocalBackend::predictor() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return predictor_;
}

Reply LocalBackend::predict(const std::string& body) {
  std::shared_ptr<Predictor> p;
  InputSpec spec;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    p = predictor_;
    spec = spec_;
  }
  if (p->generates_text()) {
    GenerateParams g = parse_generate_request(body, limits_);
    return {200, encode_generation(p->generate({g.prompt, g.tokens, g.temperature, g.top_k, g.seed}))};
  }
  // Announced while it is parsed, so an adaptive batch waits for it (batcher.h).
  struct Announcement {
    DynamicBatcher& batcher;
    bool submitted = false;
    explicit Announcement(DynamicBatcher& b) : batcher(b) { batcher.announce(); }
    ~Announcement() {
      if (!submitted) batcher.withdraw();
    }
  } announcement(batcher_);
  PredictInputs in = parse_predict_request(body, spec, limits_);
  Tensor rows = spec.dtype == DType::Int64 ? from_vector(in.ids, in.shape) : from_vector(in.values, in.shape);
  announcement.submitted = true;
  std::future<Tensor> reply = batcher_.submit(rows, /*announced=*/true);
  if (reply.wait_for(request_timeout_) != std::future_status::ready)
    throw TimeoutError("[serve] no answer from the model within " + std::to_string(request_timeout_.count()) +
                       " ms (--request-timeout-ms)");
  Tensor out = reply.get().contiguous();
  return {200, encode_predictions(out.data<float>(), out.shape()[0], out.shape()[1], p->regression(), in.top_k)};
}

Reply LocalBackend::reload() {
  std::lock_guard<std::mutex> one_at_a_time(reload_mutex_);
  std::shared_ptr<Predictor> next = Predictor::load(checkpoint_);  // beside the old: requests go on
  InputSpec spec = input_spec_of(*next);
  std::lock_guard<std::mutex> lock(mutex_);
  TESSERA_CHECK(next->model_name() == predictor_->model_name() && spec.sample_shape == spec_.sample_shape &&
                    next->outputs() == predictor_->outputs(),
                "[serve] ", next->checkpoint(), " holds a ", next->model_name(), " taking ", spec.description,
                "; this server runs a ", predictor_->model_name(), " taking ", spec_.description,
                ": start another server for another model");
  predictor_ = next;
  spec_ = spec;
  return {200, nlohmann::json{{"reloaded", next->checkpoint()}}.dump()};
}

Reply LocalBackend::health() {
  auto p = predictor();
  return {200, nlohmann::json{{"status", "ok"}, {"model", p->model_name()}, {"checkpoint", p->checkpoint()}}.dump()};
}

}  // namespace tessera::serve
