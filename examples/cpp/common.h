// What the example programs share: the data (Fashion-MNIST when Debian's dataset-fashion-mnist is
// installed, else a synthetic set of the same shape), a command line of --steps and --synthetic,
// and the test accuracy of a classifier.
#pragma once
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "tessera/tessera.h"

namespace example {

struct Args {
  int64_t steps = 200;
  bool synthetic = false;
  std::string out = "/tmp/tessera-example";
};

inline Args parse_args(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--steps") && i + 1 < argc) a.steps = std::atoll(argv[++i]);
    else if (!std::strcmp(argv[i], "--synthetic")) a.synthetic = true;
    else if (!std::strcmp(argv[i], "--out") && i + 1 < argc) a.out = argv[++i];
    else {
      std::fprintf(stderr, "usage: %s [--steps N] [--synthetic] [--out DIR]\n", argv[0]);
      std::exit(2);
    }
  }
  return a;
}

// 28×28 images flattened to 784 features, 10 classes.
inline std::shared_ptr<tessera::data::TensorDataset> dataset(const Args& a, const std::string& split) {
  const char* dir = "/usr/share/datasets/fashion-mnist";
  if (!a.synthetic && ::access(dir, R_OK) == 0) return tessera::data::load_fashion_mnist(dir, split);
  return tessera::data::make_synthetic_classification(split == "train" ? 4096 : 512, {784}, 10, 1,
                                                      split == "train" ? 0 : 1);
}

// Fraction of `set` the model classifies right, without recording gradients.
inline double accuracy(tessera::nn::Module& model, const tessera::data::TensorDataset& set) {
  tessera::NoGradGuard no_grad;
  model.train(false);
  tessera::Tensor x = tessera::reshape(set.inputs(), {set.size(), -1});
  tessera::Tensor predicted = tessera::argmax(model(x), 1);
  const int64_t* p = predicted.data<int64_t>();
  const int64_t* y = set.targets().data<int64_t>();
  int64_t right = 0;
  for (int64_t i = 0; i < set.size(); ++i) right += p[i] == y[i];
  model.train(true);
  return static_cast<double>(right) / static_cast<double>(set.size());
}

// A checksum of every parameter (the ranks of a data-parallel job must print the same one).
inline double checksum(tessera::nn::Module& model) {
  double sum = 0.0;
  for (auto& p : model.parameters())
    for (float v : p.to_vector<float>()) sum += static_cast<double>(v);
  return sum;
}

}  // namespace example
