// A synthetic text-classification set with a large vocabulary, for training sparse embeddings
// (nn::EmbeddingBag): a batch touches a few thousand of the vocabulary's rows, so a parameter-server
// worker moves only those, where data parallelism all-reduces every row each step.
#pragma once
#include <cstdint>
#include <memory>

#include "tessera/data/dataset.h"

namespace tessera::data {

// Each of `classes` classes has `topic_words` ids of its own, drawn uniformly from [0, vocab) by `seed`
// (with replacement; classes may share an id by chance, rarely for a large vocabulary). A sample is a
// class drawn uniformly and `bag_length` ids, each one of its class's topic ids (uniformly) with
// probability 0.5, else uniform over the vocabulary. inputs int64 (n, bag_length), targets int64 (n).
// The topics depend on `seed` only, the samples on `seed` and `stream`: a train set (stream 0) and a
// test set (stream 1) with one seed are one task with different samples.
std::shared_ptr<TensorDataset> make_bag_of_words(int64_t n, int64_t vocab, int64_t bag_length, int64_t classes,
                                                 int64_t topic_words, uint64_t seed, uint64_t stream = 0);

}  // namespace tessera::data
