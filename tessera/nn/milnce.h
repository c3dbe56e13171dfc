// MIL-NCE (Miech et al., "End-to-End Learning of Visual Representations from Uncurated Instructional
// Videos", 2020): a video encoder and a text encoder trained so that each clip scores high with its
// narrations. A clip comes with K candidate narrations, some unrelated (narrations are only loosely
// aligned with what is shown): the positives are pooled by log-sum-exp (multiple-instance learning),
//
//   loss_i = -log( Σ_k e^{v_i·t_ik/τ} / (Σ_k e^{v_i·t_ik/τ} + Σ_{j≠i,k} e^{v_i·t_jk/τ} + Σ_{j≠i,k} e^{v_j·t_ik/τ}) ),
//
// with the negatives of both directions drawn from the global batch: under data parallelism each
// rank gathers every rank's embeddings with all_gather_with_grad (whose backward reduce-scatters the
// gradient), so N ranks compute the loss and gradients of one process on the whole batch.
//
// The encoders work on pre-extracted clip features (data/clip_text.h): a clip is (T, F) frame
// features, mean-pooled over time then an MLP; a narration is L word ids, an EmbeddingBag then a
// linear projection. Both embeddings are L2-normalised, so v·t is a cosine.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "tessera/dist/process_group.h"
#include "tessera/nn/embedding_bag.h"
#include "tessera/nn/layers.h"
#include "tessera/nn/char_transformer.h"
#include "tessera/nn/transformer.h"

namespace tessera::nn {

struct MilNceConfig {
  int64_t feature_dim = 64;   // F
  int64_t vocab = 1000;       // word ids are in [0, vocab)
  int64_t hidden = 256;       // the video MLP's hidden width
  int64_t embed_dim = 128;    // D, shared by both branches
  // The text branch: "bag" (TextEncoder) or "transformer" (TransformerTextEncoder) of `layers`
  // blocks with `heads` heads over narrations of at most `words` ids.
  std::string text = "bag";
  int64_t layers = 2, heads = 4, words = 8;
  // The packed input of MilNceModel: T frames, K candidates.
  int64_t frames = 8, candidates = 4;
};

// (B, T, F) clip features -> (B, D), L2-normalised.
class VideoEncoder : public Module {
 public:
  explicit VideoEncoder(const MilNceConfig& config);
  Tensor forward(const Tensor& clips) override;
  std::string name() const override { return "VideoEncoder"; }
  std::shared_ptr<Linear> fc1, fc2;
};

// (B, K, L) word ids -> (B, K, D), L2-normalised; (B, L) -> (B, D) for single narrations.
class TextEncoder : public Module {
 public:
  explicit TextEncoder(const MilNceConfig& config);
  Tensor forward(const Tensor& words) override;
  std::string name() const override { return "TextEncoder"; }
  std::shared_ptr<EmbeddingBag> bag;
  std::shared_ptr<Linear> proj;
};

// The transformer text branch: word and position embeddings, `layers` pre-norm blocks, a final
// LayerNorm, the mean over the narration's words (padding id 0 left out), a projection,
// L2-normalised. The blocks' attention is causal; padding comes after the words, so no word attends
// to it. (B, L) -> (B, D), (B, K, L) -> (B, K, D).
class TransformerTextEncoder : public Module {
 public:
  explicit TransformerTextEncoder(const MilNceConfig& config);
  Tensor forward(const Tensor& words) override;
  std::string name() const override { return "TransformerTextEncoder"; }
  std::shared_ptr<GptEmbedding> embed;  // word + position embeddings, as the char-LM's
  std::vector<std::shared_ptr<TransformerBlock>> blocks;
  std::shared_ptr<LayerNorm> ln_f;
  std::shared_ptr<Linear> proj;
};

// Both branches as one module, for the trainer (model.name = "milnce"): one input tensor per clip,
// (B, T·F + K·L) float32 — the clip's frame features, then its K narrations' word ids as floats
// (exact below 2^24) — and one output, (B, 1 + K, D): the clip's embedding, then its narrations'.
// mil_nce_loss(output[:, 0], output[:, 1:]) is the loss. Packing keeps the trainer's one-input
// contract, so DDP and ZeRO wrap it like any other model.
class MilNceModel : public Module {
 public:
  explicit MilNceModel(const MilNceConfig& config);
  Tensor forward(const Tensor& packed) override;
  std::string name() const override { return "MilNceModel"; }
  const MilNceConfig& config() const { return config_; }
  std::shared_ptr<VideoEncoder> video;
  std::shared_ptr<Module> text;

 private:
  MilNceConfig config_;
};
// Packs clips (B, T, F) and word ids (B, K, L) into MilNceModel's input.
Tensor pack_clip_text(const Tensor& clips, const Tensor& words);
// The loss of MilNceModel's output (B, 1 + K, D).
Tensor mil_nce_loss_of(const Tensor& output, float temperature, dist::ProcessGroup* group = nullptr);
// Of a batch's output: how many clips' narrations (pooled by log-sum-exp over K, as in the loss)
// score their own clip highest among the batch's (in-batch text→video R@1 × B).
int64_t in_batch_hits(const Tensor& output, float temperature);

// x / ||x|| along the last dimension (eps keeps a zero row finite).
Tensor l2_normalize(const Tensor& x, float eps = 1e-6f);
// log Σ exp(x) along `dim` (kept out), stable: the row maximum is subtracted first.
Tensor logsumexp(const Tensor& x, int64_t dim);

// The mean MIL-NCE loss over this rank's clips: video (B, D), text (B, K, D), both already embedded.
// With a group, the negatives come from every rank's batch (ranks may hold different B); without
// one (nullptr), from this batch alone.
Tensor mil_nce_loss(const Tensor& video, const Tensor& text, float temperature, dist::ProcessGroup* group = nullptr);

// Text -> video retrieval: query i (row i of `text`, (N, D)) should find video i among all N
// (`video`, (N, D)). Recall@k is the fraction of queries whose video ranks within the first k.
struct RetrievalMetrics {
  double r1 = 0, r5 = 0, r10 = 0;
  double median_rank = 0;  // 1 = always first
  int64_t queries = 0;
};
RetrievalMetrics text_to_video_retrieval(const Tensor& text, const Tensor& video);

}  // namespace tessera::nn
