// What rank 0 of a job under the elastic agent (`tessera run --nnodes MIN:MAX ...`, which sets
// TESSERA_ELASTIC_GENERATION) tells its agent through the generation's store: the step it started
// (or resumed) at, "elastic/resumed" (and whether survivors saved it, "elastic/resumed_from_survivors_of"),
// and each step it completes, "elastic/step". From these the
// agent reports the time from a failure to training resumed and the steps lost.
#pragma once
#include <cstdint>
#include <memory>

#include "tessera/dist/store/store.h"

namespace tessera::train {

// Whether this process was started by the elastic agent (it alone sets TESSERA_ELASTIC_MAX_WORLD;
// tessera.ray's trainer sets the generation too, for the survivors' save, but restarts its groups
// itself). Live membership's "auto" is on there (trainer_live.cpp).
bool under_the_elastic_agent();

class ElasticReport {
 public:
  // Null when this process is not rank 0 of an elastic job.
  static std::unique_ptr<ElasticReport> from_environment(int rank);
  // `survivors_of`: the generation whose survivors saved the resumed step (-1: none).
  void started(int64_t step, int64_t survivors_of);
  void stepped(int64_t step);

 private:
  explicit ElasticReport(std::shared_ptr<dist::Store> store) : store_(std::move(store)) {}
  std::shared_ptr<dist::Store> store_;
};

}  // namespace tessera::train
