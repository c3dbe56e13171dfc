#include "tessera/serve/predictor.h"

#include "tessera/autograd/grad_mode.h"
#include "tessera/core/error.h"
#include "tessera/core/rng.h"
#include "tessera/nn/char_transformer.h"
#include "tessera/ops/ops.h"
#include "tessera/train/builders.h"
#include "tessera/train/whole_checkpoint.h"
#include "tessera/io/checkpoint_keys.h"

namespace tessera::serve {
namespace checkpoint_keys = io::checkpoint_keys;

std::shared_ptr<Predictor> Predictor::load(const std::string& path) {
  io::CheckpointFiles files = train::load_whole_checkpoint(path);
  const auto& meta = files.model.metadata;
  auto config_it = meta.find(checkpoint_keys::kConfig);
  if (config_it == meta.end())
    throw ValueError("[serve] " + files.path + "/model.safetensors has no tessera.config metadata; was it written by "
                     "tessera train?");
  std::shared_ptr<Predictor> p(new Predictor());
  p->config_ = train::parse_config(config_it->second, files.path + " (tessera.config)");
  p->entry_ = &train::model_entry(p->config_.model.name);
  p->checkpoint_ = files.path;
  int64_t vocab_size = 0;
  if (auto v = meta.find(checkpoint_keys::kVocabulary); v != meta.end()) {
    p->vocabulary_ = data::Vocabulary::from_string(v->second);
    vocab_size = p->vocabulary_->size();
  }
  p->model_ = train::build_model(p->config_, vocab_size);
  p->model_->load_state_dict(files.model.tensors, true);
  p->model_->eval();
  if (p->generates_text()) return p;

  const train::ModelEntry& entry = p->model_entry();
  if (entry.image_shape) p->sample_shape_ = *entry.image_shape;
  else if (entry.reads_word_ids) p->sample_shape_ = {p->config_.data.bag_length};
  else p->sample_shape_ = {p->config_.model.input_dim};
  // One forward of a zero sample: checks the weights fit the model and tells the output width.
  Shape one{1};
  one.insert(one.end(), p->sample_shape_.begin(), p->sample_shape_.end());
  NoGradGuard no_grad;
  p->outputs_ = p->model_->forward(zeros(one, p->input_dtype())).shape().back();
  return p;
}

std::string Predictor::describe_input() const {
  if (generates_text()) return "{\"prompt\": text}";
  if (model_entry().reads_word_ids) return "[N, L] int64 word ids below " + std::to_string(id_bound());
  std::string s = shape_str(sample_shape_);
  s.insert(1, "N, ");
  if (sample_shape_.size() > 1) s += " or [N, " + std::to_string(shape_numel(sample_shape_)) + "]";
  return s + " float32";
}

Tensor Predictor::predict(const Tensor& batch) {
  TESSERA_CHECK(!generates_text(), "[serve] the ", model_name(), " model generates text: send {\"prompt\": ...}");
  NoGradGuard no_grad;
  Tensor out = model_->forward(batch);
  return regression() ? out : softmax(out, 1);
}

std::string Predictor::generate(const GenerateRequest& request) {
  TESSERA_CHECK(generates_text(), "[serve] the ", model_name(), " model is not a language model: send {\"inputs\": ...}");
  std::vector<int64_t> prompt = vocabulary_->encode(request.prompt);  // ValueError for unknown bytes
  TESSERA_CHECK(!prompt.empty(), "[serve] the prompt is empty: give at least one character");
  std::lock_guard<std::mutex> lock(generate_mutex_);
  Generator gen(request.seed);
  auto& lm = dynamic_cast<nn::CharTransformer&>(*model_);
  std::vector<int64_t> ids = lm.generate(prompt, request.tokens, request.temperature, request.top_k, gen);
  return vocabulary_->decode(std::vector<int64_t>(ids.begin() + static_cast<std::ptrdiff_t>(prompt.size()), ids.end()));
}

}  // namespace tessera::serve
