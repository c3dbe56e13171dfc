// The metadata keys of a tessera checkpoint (io/checkpoint.h), written once: the trainer writes them,
// and resume, `tessera eval`, `generate` and `serve` read them. model.safetensors carries the config and
// (char-LM) the vocabulary; trainer.safetensors the loop's position, the RNG and the loss scale.
// (The checksum keys belong to the file format: io/safetensors_layout.h.)
#pragma once

namespace tessera::io::checkpoint_keys {

// model.safetensors
inline constexpr const char* kConfig = "tessera.config";          // the run's TOML config
inline constexpr const char* kVocabulary = "tessera.vocabulary";  // the char-LM's characters

// trainer.safetensors
inline constexpr const char* kStep = "tessera.step";
inline constexpr const char* kEpoch = "tessera.epoch";
inline constexpr const char* kBatchInEpoch = "tessera.batch_in_epoch";
inline constexpr const char* kGlobalBatchSize = "tessera.global_batch_size";
inline constexpr const char* kSamplesInEpoch = "tessera.samples_in_epoch";
inline constexpr const char* kWorldSize = "tessera.world_size";
inline constexpr const char* kStrategy = "tessera.strategy";
inline constexpr const char* kRunId = "tessera.run_id";
inline constexpr const char* kRng = "tessera.rng";
inline constexpr const char* kLossScale = "tessera.loss_scale";
inline constexpr const char* kLossScaleGrowthTracker = "tessera.loss_scale_growth_tracker";
inline constexpr const char* kSkippedSteps = "tessera.skipped_steps";
inline constexpr const char* kSurvivorsOfGeneration = "tessera.survivors_of_generation";
// Written by model-parallel runs of earlier versions, without the optimizer's state: never resumed.
inline constexpr const char* kLegacyModelParallel = "tessera.model_parallel";

}  // namespace tessera::io::checkpoint_keys
