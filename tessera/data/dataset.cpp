#include "tessera/data/dataset.h"

#include <cmath>
#include <cstring>
#include <filesystem>

#include "tessera/core/rng.h"
#include "tessera/data/idx.h"

namespace tessera::data {

namespace {

Tensor stored(const Tensor& t, const char* name) {
  TESSERA_CHECK(t.defined(), "[TensorDataset] ", name, " is an undefined tensor");
  TESSERA_CHECK(t.dim() >= 1, "[TensorDataset] ", name, " must have a first (sample) dimension, got shape ",
                shape_str(t.shape()));
  Tensor d = t.detach();
  return d.is_contiguous() ? d : d.contiguous();
}

// Gathers rows `indices` of contiguous `src` into a new (indices.size(), ...) tensor.
Tensor gather_rows(const Tensor& src, const std::vector<int64_t>& indices) {
  Shape shape = src.shape();
  const int64_t rows = shape[0];
  shape[0] = static_cast<int64_t>(indices.size());
  Tensor out = Tensor::empty(shape, src.dtype());
  Shape row_shape(src.shape().begin() + 1, src.shape().end());
  const size_t row_bytes = static_cast<size_t>(shape_numel(row_shape)) * dtype_size(src.dtype());
  const char* from = static_cast<const char*>(src.raw_data());
  char* to = static_cast<char*>(out.raw_data());
  for (size_t i = 0; i < indices.size(); ++i) {
    const int64_t r = indices[i];
    TESSERA_CHECK_INDEX(r >= 0 && r < rows, "[TensorDataset] sample index ", r, " (position ", i,
                        " of the batch) is out of range for a dataset of ", rows, " samples");
    std::memcpy(to + i * row_bytes, from + static_cast<size_t>(r) * row_bytes, row_bytes);
  }
  return out;
}

std::string find_idx_file(const std::string& dir, const std::string& name) {
  namespace fs = std::filesystem;
  const fs::path gz = fs::path(dir) / (name + ".gz"), plain = fs::path(dir) / name;
  if (fs::exists(gz)) return gz.string();
  if (fs::exists(plain)) return plain.string();
  throw IoError(detail::concat("[fashion-mnist] missing ", gz.string(), " (nor ", plain.filename().string(),
                               "): install it with `apt-get install dataset-fashion-mnist` or set data.dir to a "
                               "directory holding the Fashion-MNIST (or MNIST) IDX files"));
}

}  // namespace

TensorDataset::TensorDataset(Tensor inputs, Tensor targets)
    : inputs_(stored(inputs, "inputs")), targets_(stored(targets, "targets")), size_(inputs_.shape()[0]) {
  TESSERA_CHECK(targets_.shape()[0] == size_, "[TensorDataset] inputs ", shape_str(inputs_.shape()), " and targets ",
                shape_str(targets_.shape()), " differ in their first (sample) dimension");
}

Batch TensorDataset::get_batch(const std::vector<int64_t>& indices) const {
  return {gather_rows(inputs_, indices), gather_rows(targets_, indices)};
}

std::shared_ptr<TensorDataset> load_fashion_mnist(const std::string& dir, const std::string& split) {
  TESSERA_CHECK(split == "train" || split == "test", "[fashion-mnist] split must be \"train\" or \"test\", got \"",
                split, "\"");
  const std::string prefix = split == "train" ? "train" : "t10k";
  const std::string images_path = find_idx_file(dir, prefix + "-images-idx3-ubyte");
  const std::string labels_path = find_idx_file(dir, prefix + "-labels-idx1-ubyte");
  IdxArray images = read_idx(images_path);
  IdxArray labels = read_idx(labels_path);
  if (images.shape.size() != 3)
    throw IoError(detail::concat("[fashion-mnist] ", images_path, " has shape ", shape_str(images.shape),
                                 "; expected (N, rows, cols) images"));
  if (labels.shape.size() != 1)
    throw IoError(detail::concat("[fashion-mnist] ", labels_path, " has shape ", shape_str(labels.shape),
                                 "; expected (N) labels"));
  const int64_t n = images.shape[0];
  if (labels.shape[0] != n)
    throw IoError(detail::concat("[fashion-mnist] ", images_path, " holds ", n, " images but ", labels_path, " holds ",
                                 labels.shape[0], " labels; the files are from different sets"));

  // One table lookup per pixel: (v / 255 - mean) / std for each of the 256 byte values.
  float table[256];
  for (int v = 0; v < 256; ++v) table[v] = (static_cast<float>(v) / 255.0f - kFashionMnistMean) / kFashionMnistStd;
  Tensor x = Tensor::empty({n, 1, images.shape[1], images.shape[2]}, DType::Float32);
  float* px = x.data<float>();
  for (size_t i = 0; i < images.data.size(); ++i) px[i] = table[images.data[i]];

  Tensor y = Tensor::empty({n}, DType::Int64);
  int64_t* py = y.data<int64_t>();
  for (int64_t i = 0; i < n; ++i) {
    py[i] = labels.data[static_cast<size_t>(i)];
    if (py[i] > 9)
      throw IoError(detail::concat("[fashion-mnist] ", labels_path, " holds label ", py[i], " at index ", i,
                                   "; Fashion-MNIST labels are 0..9"));
  }
  return std::make_shared<TensorDataset>(x, y);
}

std::shared_ptr<TensorDataset> make_synthetic_classification(int64_t n, const Shape& sample_shape, int64_t classes,
                                                             uint64_t seed, uint64_t stream) {
  TESSERA_CHECK(n >= 0, "[synthetic] the number of samples must be >= 0, got ", n);
  TESSERA_CHECK(classes >= 2, "[synthetic] need at least 2 classes, got ", classes);
  for (int64_t d : sample_shape)
    TESSERA_CHECK(d > 0, "[synthetic] sample_shape ", shape_str(sample_shape), " must have positive dims");
  const int64_t features = shape_numel(sample_shape);

  // Centres (classes, features) with coordinates N(0, sigma^2), sigma = 4 / sqrt(2 features): two
  // centres are then ~4 apart whatever the number of features (pairwise Bayes error ~2%).
  const double sigma = 4.0 / std::sqrt(2.0 * static_cast<double>(features));
  Generator centre_gen(mix64(seed));
  std::vector<float> mu(static_cast<size_t>(classes * features));
  for (float& v : mu) v = static_cast<float>(centre_gen.normal() * sigma);
  std::vector<double> offset(static_cast<size_t>(classes));  // -|mu_c|^2 / 2
  for (int64_t c = 0; c < classes; ++c)
    for (int64_t f = 0; f < features; ++f) offset[c] -= 0.5 * double(mu[c * features + f]) * mu[c * features + f];

  Shape shape{n};
  shape.insert(shape.end(), sample_shape.begin(), sample_shape.end());
  Tensor x = Tensor::empty(shape, DType::Float32);
  Tensor y = Tensor::empty({n}, DType::Int64);
  float* px = x.data<float>();
  int64_t* py = y.data<int64_t>();
  Generator sample_gen(mix64(mix64(seed) ^ mix64(stream + 1)));
  for (int64_t i = 0; i < n; ++i) {
    const int64_t centre = static_cast<int64_t>(sample_gen.next_u64() % static_cast<uint64_t>(classes));
    float* row = px + i * features;
    for (int64_t f = 0; f < features; ++f) row[f] = sample_gen.normal() + mu[centre * features + f];
    int64_t best = 0;
    double best_score = 0;
    for (int64_t c = 0; c < classes; ++c) {
      double s = offset[c];  // in double, so near-ties are rare and always resolved alike
      for (int64_t f = 0; f < features; ++f) s += static_cast<double>(mu[c * features + f]) * row[f];
      if (c == 0 || s > best_score) best = c, best_score = s;
    }
    py[i] = best;
  }
  return std::make_shared<TensorDataset>(x, y);
}

}  // namespace tessera::data
