// MIL-NCE (nn/milnce.h): a video MLP and a text encoder trained to match clips with their captions.
// Its shapes are the data's (data.dir/train/meta.json), and its loss draws the negatives from the
// replicas' whole batch, so it trains with the strategies that have replicas (ddp, zero).
#include "tessera/data/clip_text.h"
#include "tessera/nn/milnce.h"
#include "tessera/train/model_registry.h"

namespace tessera::train {

ModelEntry milnce_model() {
  ModelEntry e;
  e.name = "milnce";
  e.datasets = {"clip-text"};
  e.build = [](const TrainConfig& c, int64_t) -> std::shared_ptr<nn::Module> {
    const data::ClipTextMeta m = data::read_clip_text_meta(c.data.dir + "/train");
    nn::MilNceConfig mc;
    mc.feature_dim = m.feature_dim, mc.vocab = m.vocab, mc.frames = m.frames, mc.candidates = m.candidates;
    mc.words = m.words, mc.hidden = c.model.hidden.front(), mc.embed_dim = c.model.embed_dim;
    mc.text = c.model.text_encoder, mc.layers = c.model.layers, mc.heads = c.model.heads;
    return std::make_shared<nn::MilNceModel>(mc);
  };
  e.validate = [](const TrainConfig& c) {
    TESSERA_CHECK(c.model.text_encoder == "bag" || c.model.text_encoder == "transformer", "[config] model.text_encoder = '",
                  c.model.text_encoder, "' is not one of: bag, transformer");
    TESSERA_CHECK(c.model.temperature > 0, "[config] model.temperature must be positive, got ", c.model.temperature);
    TESSERA_CHECK(!c.model.hidden.empty() && c.model.hidden.front() > 0, "[config] model.hidden[0] is the milnce video "
                  "MLP's width: give a positive one");
    TESSERA_CHECK(c.distributed.strategy != "ps" && c.distributed.strategy != "mesh" && c.parallel.pp == 1 &&
                      c.parallel.tp == 1,
                  "[config] model.name = 'milnce' trains with distributed.strategy 'ddp' or 'zero' (its negatives come "
                  "from the replicas' whole batch); not '", c.distributed.strategy, "' or pipeline/tensor parallelism");
  };
  e.objective = [](const TrainConfig& c) {
    const auto temperature = static_cast<float>(c.model.temperature);
    return Objective{[temperature](const Tensor& output, const Tensor&, dist::ProcessGroup* group) {
                       return nn::mil_nce_loss_of(output, temperature, group);
                     },
                     [temperature](const Tensor& output, const Tensor&) {
                       return nn::in_batch_hits(output, temperature);
                     }};
  };
  return e;
}

}  // namespace tessera::train
