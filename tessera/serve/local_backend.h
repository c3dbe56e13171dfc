// The model in this process: requests are parsed, validated against the model's inputs, batched
// (batcher.h) and run by the predictor. A reload builds the new predictor beside the old one and
// swaps it in between two batches.
#pragma once
#include <chrono>
#include <memory>
#include <mutex>

#include "tessera/serve/backend.h"
#include "tessera/serve/batcher.h"
#include "tessera/serve/metrics.h"
#include "tessera/serve/predictor.h"
#include "tessera/serve/request_codec.h"

namespace tessera::serve {

class LocalBackend : public Backend {
 public:
  LocalBackend(std::string checkpoint, BatcherOptions batching, RequestLimits limits, ServeMetrics& metrics,
               std::chrono::milliseconds request_timeout);
  Reply predict(const std::string& body) override;
  Reply reload() override;
  Reply health() override;
  void stop() override { batcher_.stop(); }

  std::shared_ptr<Predictor> predictor() const;

 private:
  std::string checkpoint_;
  RequestLimits limits_;
  std::chrono::milliseconds request_timeout_;
  mutable std::mutex mutex_;  // guards predictor_ and spec_ (swapped by reload)
  std::shared_ptr<Predictor> predictor_;
  InputSpec spec_;
  std::mutex reload_mutex_;   // one reload at a time
  DynamicBatcher batcher_;
};

InputSpec input_spec_of(const Predictor& p);

}  // namespace tessera::serve
