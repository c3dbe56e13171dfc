// A trained model ready to answer requests: the checkpoint's config rebuilds the model (as `tessera
// eval` does), its weights are loaded, and it runs in eval mode without gradients. What it takes and
// gives depends on the model: classifiers (mlp, cnn, logistic, bow) map a batch of samples to class
// probabilities, `linear` to one number per sample, and the char-LM continues a text prompt.
#pragma once
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "tessera/core/tensor.h"
#include "tessera/data/char_dataset.h"
#include "tessera/nn/module.h"
#include "tessera/train/config.h"
#include "tessera/train/model_registry.h"

namespace tessera::serve {

struct GenerateRequest {
  std::string prompt;
  int64_t tokens = 100;
  float temperature = 0.8f;
  int64_t top_k = 0;  // 0: sample from every symbol
  uint64_t seed = 0;
};

class Predictor {
 public:
  // `path`: a checkpoint directory, model.safetensors or a run directory (its newest checkpoint); a
  // ZeRO run's shards are consolidated. IoError/ValueError naming the path when it is not a model.
  static std::shared_ptr<Predictor> load(const std::string& path);

  const std::string& model_name() const { return config_.model.name; }
  const std::string& checkpoint() const { return checkpoint_; }  // the step directory read
  bool generates_text() const { return vocabulary_.has_value(); }
  const train::ModelEntry& model_entry() const { return *entry_; }  // looked up once, at load
  bool regression() const { return model_entry().regression; }
  int64_t outputs() const { return outputs_; }  // classes (1 for regression)

  // One sample's shape and dtype: [1, 28, 28] float32 for the cnn, [input_dim] float32 for the
  // other dense models, [bag_length] int64 for bow (any bag length is accepted).
  const Shape& sample_shape() const { return sample_shape_; }
  DType input_dtype() const { return model_entry().reads_word_ids ? DType::Int64 : DType::Float32; }
  // What a request may send, for error messages: "[N, 1, 28, 28] or [N, 784] float32".
  std::string describe_input() const;
  // The id bound of bow's inputs (vocabulary size), 0 for the others.
  int64_t id_bound() const { return model_entry().reads_word_ids ? config_.data.vocab_size : 0; }

  // [n, *sample_shape] -> [n, outputs]: softmax probabilities for classifiers, values for regression.
  // Not for concurrent calls (the server's batcher is its one caller).
  Tensor predict(const Tensor& batch);
  // The char-LM's continuation of the prompt. Serialised by a mutex of its own.
  std::string generate(const GenerateRequest& request);

 private:
  Predictor() = default;
  train::TrainConfig config_;
  const train::ModelEntry* entry_ = nullptr;
  std::string checkpoint_;
  std::shared_ptr<nn::Module> model_;
  std::optional<data::Vocabulary> vocabulary_;
  Shape sample_shape_;
  int64_t outputs_ = 0;
  std::mutex generate_mutex_;
};

}  // namespace tessera::serve
