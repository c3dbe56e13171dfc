#include "tessera/data/bag_of_words.h"

#include <vector>

#include "tessera/core/rng.h"

namespace tessera::data {

namespace {

// Uniform in [0, bound); the modulo bias of a 64-bit draw is below 2^-40 for any bound used here.
int64_t below(Generator& gen, int64_t bound) { return static_cast<int64_t>(gen.next_u64() % static_cast<uint64_t>(bound)); }

}  // namespace

std::shared_ptr<TensorDataset> make_bag_of_words(int64_t n, int64_t vocab, int64_t bag_length, int64_t classes,
                                                 int64_t topic_words, uint64_t seed, uint64_t stream) {
  TESSERA_CHECK(n >= 0, "[bag-of-words] the number of samples must be >= 0, got ", n);
  TESSERA_CHECK(vocab > 0 && bag_length > 0 && topic_words > 0,
                "[bag-of-words] vocab, bag_length and topic_words must be positive, got ", vocab, ", ", bag_length,
                ", ", topic_words);
  TESSERA_CHECK(classes >= 2, "[bag-of-words] need at least 2 classes, got ", classes);

  Generator topic_gen(mix64(seed));
  std::vector<int64_t> topics(static_cast<size_t>(classes * topic_words));  // (classes, topic_words)
  for (int64_t& id : topics) id = below(topic_gen, vocab);

  Tensor x = Tensor::empty({n, bag_length}, DType::Int64);
  Tensor y = Tensor::empty({n}, DType::Int64);
  int64_t* px = x.data<int64_t>();
  int64_t* py = y.data<int64_t>();
  Generator sample_gen(mix64(mix64(seed) ^ mix64(stream + 1)));
  for (int64_t i = 0; i < n; ++i) {
    const int64_t c = below(sample_gen, classes);
    py[i] = c;
    for (int64_t j = 0; j < bag_length; ++j)
      px[i * bag_length + j] = sample_gen.uniform() < 0.5f ? topics[c * topic_words + below(sample_gen, topic_words)]
                                                           : below(sample_gen, vocab);
  }
  return std::make_shared<TensorDataset>(x, y);
}

}  // namespace tessera::data
