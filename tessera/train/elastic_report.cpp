#include "tessera/train/elastic_report.h"

#include <cstdlib>
#include <string>

#include "tessera/dist/store/store_from_env.h"
#include "tessera/dist/launcher/env.h"
#include "tessera/util/settings.h"

namespace tessera::train {

bool under_the_elastic_agent() { return env_setting(dist::launcher::kElasticMaxWorldVariable) != nullptr; }

std::unique_ptr<ElasticReport> ElasticReport::from_environment(int rank) {
  if (rank != 0 || env_setting(dist::launcher::kElasticGenerationVariable) == nullptr) return nullptr;
  return std::unique_ptr<ElasticReport>(new ElasticReport(dist::store_from_env(dist::Milliseconds(30000))));
}

// A report is never worth failing training over: a store gone away means the agent is restarting us.
void ElasticReport::started(int64_t step, int64_t survivors_of) {
  try {
    store_->set(dist::launcher::kElasticResumedFromKey, std::to_string(survivors_of));
    store_->set(dist::launcher::kElasticResumedKey, std::to_string(step));
  } catch (const std::exception&) {
  }
}

void ElasticReport::stepped(int64_t step) {
  try {
    store_->set(dist::launcher::kElasticStepKey, std::to_string(step));
  } catch (const std::exception&) {
  }
}

}  // namespace tessera::train
