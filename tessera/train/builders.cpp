#include "tessera/train/builders.h"

#include "tessera/data/bag_of_words.h"
#include "tessera/data/clip_text.h"
#include "tessera/data/csv.h"
#include "tessera/data/csv_stream.h"
#include "tessera/data/image_folder.h"
#include "tessera/optim/adam.h"
#include "tessera/optim/lamb.h"
#include "tessera/optim/lars.h"
#include "tessera/optim/sgd.h"
#include "tessera/train/model_registry.h"

namespace tessera::train {

std::shared_ptr<nn::Module> build_model(const TrainConfig& c, int64_t vocab_size) {
  return model_entry(c.model.name).build(c, vocab_size);
}

// `lr` is o.lr after optimizer.scale_lr.
std::unique_ptr<optim::Optimizer> build_optimizer(OptimizerConfig o, double lr, std::vector<Tensor> params) {
  o.lr = lr;
  if (o.name == "sgd")
    return std::make_unique<optim::SGD>(std::move(params),
                                        optim::SGDOptions{o.lr, o.momentum, 0.0, o.weight_decay, o.nesterov});
  if (o.name == "lars") {
    optim::LARSOptions l{.lr = o.lr, .momentum = o.momentum, .weight_decay = o.weight_decay,
                         .trust_coefficient = o.trust_coefficient, .exclude_bias_and_norm = o.exclude_bias_and_norm};
    return std::make_unique<optim::LARS>(std::move(params), l);
  }
  if (o.name == "lamb")
    return std::make_unique<optim::LAMB>(std::move(params),
                                         optim::LAMBOptions{o.lr, o.beta1, o.beta2, o.eps, o.weight_decay});
  optim::AdamOptions a{o.lr, o.beta1, o.beta2, o.eps, o.weight_decay};
  if (o.name == "adamw") return std::make_unique<optim::AdamW>(std::move(params), a);
  return std::make_unique<optim::Adam>(std::move(params), a);
}

std::shared_ptr<optim::LRScheduler> build_schedule(const ScheduleConfig& s, optim::Optimizer& opt, int64_t total_steps) {
  std::shared_ptr<optim::LRScheduler> after;
  if (s.name == "step") after = std::make_shared<optim::StepLR>(opt, s.step_size, s.gamma);
  if (s.name == "cosine")
    after = std::make_shared<optim::CosineAnnealingLR>(opt, std::max<int64_t>(1, total_steps - s.warmup_steps), s.min_lr);
  double start = s.warmup_steps > 0 ? 1.0 / static_cast<double>(s.warmup_steps) : 1.0;
  return std::make_shared<optim::LinearWarmupLR>(opt, s.warmup_steps, start, after);
}

Datasets load_datasets(const TrainConfig& c) {
  const auto& d = c.data;
  Datasets sets;
  if (d.dataset == "csv") {
    data::CsvOptions options;
    options.label = d.label;
    options.regression = model_entry(c.model.name).regression;
    auto load = [&](const std::string& where, const char* key) -> std::shared_ptr<data::Dataset> {
      if (d.streaming) {  // indexed per replica when the trainer knows its share (select_share)
        auto table = std::make_shared<data::StreamingCsv>(data::csv_files(where), options,
                                                          options.regression ? 0 : d.classes);
        TESSERA_CHECK(static_cast<int64_t>(table->feature_columns().size()) == c.model.input_dim, "[config] ", key,
                      " = ", where, " has ", table->feature_columns().size(), " feature columns, model.input_dim is ",
                      c.model.input_dim);
        return table;
      }
      data::CsvTable t = data::load_csv(data::csv_files(where), options);
      TESSERA_CHECK(static_cast<int64_t>(t.feature_columns.size()) == c.model.input_dim, "[config] ", key, " = ", where,
                    " has ", t.feature_columns.size(), " feature columns, model.input_dim is ", c.model.input_dim);
      TESSERA_CHECK(options.regression || t.classes <= d.classes, "[config] ", key, " = ", where, " has labels up to ",
                    t.classes - 1, ", data.classes is ", d.classes);
      return t.data;
    };
    sets.train = load(d.path, "data.path");
    sets.eval = load(d.test_path, "data.test_path");
  } else if (d.dataset == "clip-text") {
    // DIR/train and DIR/test in the clip-text layout (`tessera data clip-text DIR` writes a synthetic one).
    auto train = data::load_clip_text(d.dir + "/train"), test = data::load_clip_text(d.dir + "/test");
    const data::ClipTextMeta &a = train->meta(), &b = test->meta();
    TESSERA_CHECK(a.frames == b.frames && a.feature_dim == b.feature_dim && a.candidates == b.candidates &&
                      a.words == b.words && b.vocab <= a.vocab,
                  "[config] ", d.dir, "/test's clips are shaped otherwise than ", d.dir, "/train's (meta.json)");
    sets.train = std::make_shared<data::PackedClipText>(train);
    sets.eval = std::make_shared<data::PackedClipText>(test);
  } else if (d.dataset == "image-folder") {
    // DIR/train/<class>/*.png and DIR/test/<class>/*.png, decoded batch by batch.
    for (const char* split : {"train", "test"}) {
      auto set = data::load_image_folder(d.dir + "/" + split);
      const Shape s = set->image_shape();
      const ModelEntry& model = model_entry(c.model.name);
      const int64_t classes = model.fixed_classes > 0 ? model.fixed_classes : d.classes;
      TESSERA_CHECK(static_cast<int64_t>(set->classes().size()) <= classes, "[config] ", d.dir, "/", split, " has ",
                    set->classes().size(), " class folders, the model ", classes, " outputs (data.classes)");
      if (model.image_shape)
        TESSERA_CHECK(s == *model.image_shape, "[config] the ", model.name, " takes ", shape_str(*model.image_shape),
                      " images; ", d.dir, "/", split, " holds ", shape_str(s));
      else
        TESSERA_CHECK(s[0] * s[1] * s[2] == c.model.input_dim, "[config] ", d.dir, "/", split, " holds ", shape_str(s),
                      " images (", s[0] * s[1] * s[2], " values), model.input_dim is ", c.model.input_dim);
      (std::string(split) == "train" ? sets.train : sets.eval) = set;
    }
  } else if (d.dataset == "fashion-mnist") {
    sets.train = data::load_fashion_mnist(d.dir, "train");
    sets.eval = data::load_fashion_mnist(d.dir, "test");
  } else if (d.dataset == "synthetic") {
    sets.train = data::make_synthetic_classification(d.samples, {1, 28, 28}, d.classes, c.train.seed);
    sets.eval = data::make_synthetic_classification(d.test_samples, {1, 28, 28}, d.classes, c.train.seed, 1);
  } else if (d.dataset == "bag-of-words") {
    sets.train = data::make_bag_of_words(d.samples, d.vocab_size, d.bag_length, d.classes, d.topic_words,
                                         c.train.seed);
    sets.eval = data::make_bag_of_words(d.test_samples, d.vocab_size, d.bag_length, d.classes, d.topic_words,
                                        c.train.seed, 1);
  } else {
    auto split = data::split_char_corpus(data::read_text_corpus(d.path), c.model.context, d.val_fraction);
    sets.train = split.train;
    sets.eval = split.validation;
    sets.vocabulary = split.vocabulary;
  }
  return sets;
}

}  // namespace tessera::train
