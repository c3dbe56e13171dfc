#include "tessera/data/image_folder.h"

#include <png.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "tessera/core/error.h"
#include "tessera/io/atomic_file.h"
#include "tessera/ops/ops.h"

namespace tessera::data {

namespace fs = std::filesystem;

namespace {

// Bounds a corrupt header from asking for a huge buffer: 16k × 16k pixels.
constexpr png_uint_32 kMaxSide = 16384;

bool is_png(const fs::path& p) {
  std::string ext = p.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return std::tolower(c); });
  return ext == ".png";
}

}  // namespace

Tensor read_png(const std::string& path, int64_t channels) {
  TESSERA_CHECK(channels == 0 || channels == 1 || channels == 3, "[read_png] channels must be 0, 1 or 3, got ", channels);
  png_image image;
  std::memset(&image, 0, sizeof image);
  image.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_file(&image, path.c_str()))
    throw IoError("[image] " + path + ": " + image.message);
  if (image.width == 0 || image.height == 0 || image.width > kMaxSide || image.height > kMaxSide) {
    png_image_free(&image);
    throw IoError("[image] " + path + ": " + std::to_string(image.width) + "x" + std::to_string(image.height) +
                  " is outside 1..16384 pixels a side");
  }
  if (channels == 0) channels = (image.format & PNG_FORMAT_FLAG_COLOR) ? 3 : 1;
  image.format = channels == 1 ? PNG_FORMAT_GRAY : PNG_FORMAT_RGB;
  const int64_t h = image.height, w = image.width;
  std::vector<png_byte> pixels(static_cast<size_t>(PNG_IMAGE_SIZE(image)));
  if (!png_image_finish_read(&image, nullptr, pixels.data(), 0, nullptr)) {
    const std::string why = image.message;
    png_image_free(&image);
    throw IoError("[image] " + path + ": " + why);
  }
  // Interleaved HWC bytes -> planar CHW floats in [0, 1].
  Tensor out = Tensor::empty({channels, h, w});
  float* o = out.data<float>();
  for (int64_t c = 0; c < channels; ++c)
    for (int64_t i = 0; i < h * w; ++i) o[c * h * w + i] = pixels[static_cast<size_t>(i * channels + c)] / 255.0f;
  return out;
}

void write_png(const std::string& path, const Tensor& image_in) {
  TESSERA_CHECK(image_in.dim() == 3 && (image_in.shape()[0] == 1 || image_in.shape()[0] == 3),
                "[write_png] expects (C, H, W) with C 1 or 3, got ", shape_str(image_in.shape()));
  const Tensor t = contiguous(image_in);
  const int64_t c = t.shape()[0], h = t.shape()[1], w = t.shape()[2];
  const std::vector<float> v = t.to_vector<float>();
  std::vector<png_byte> pixels(static_cast<size_t>(c * h * w));
  for (int64_t k = 0; k < c; ++k)
    for (int64_t i = 0; i < h * w; ++i)
      pixels[static_cast<size_t>(i * c + k)] =
          static_cast<png_byte>(std::lround(std::clamp(v[static_cast<size_t>(k * h * w + i)], 0.0f, 1.0f) * 255.0f));
  png_image image;
  std::memset(&image, 0, sizeof image);
  image.version = PNG_IMAGE_VERSION;
  image.width = static_cast<png_uint_32>(w);
  image.height = static_cast<png_uint_32>(h);
  image.format = c == 1 ? PNG_FORMAT_GRAY : PNG_FORMAT_RGB;
  png_alloc_size_t size = 0;
  if (!png_image_write_to_memory(&image, nullptr, &size, 0, pixels.data(), 0, nullptr))
    throw IoError("[image] " + path + ": " + image.message);
  std::string bytes(size, '\0');
  if (!png_image_write_to_memory(&image, bytes.data(), &size, 0, pixels.data(), 0, nullptr))
    throw IoError("[image] " + path + ": " + image.message);
  bytes.resize(size);
  io::write_file_atomic(path, bytes);
}

ImageFolderDataset::ImageFolderDataset(std::vector<std::string> files, std::vector<int64_t> labels,
                                       std::vector<std::string> classes, int64_t channels, int64_t height, int64_t width)
    : files_(std::move(files)), labels_(std::move(labels)), classes_(std::move(classes)), channels_(channels),
      height_(height), width_(width) {}

Batch ImageFolderDataset::get_batch(const std::vector<int64_t>& indices) const {
  const int64_t n = static_cast<int64_t>(indices.size()), plane = channels_ * height_ * width_;
  Tensor inputs = Tensor::empty({n, channels_, height_, width_});
  std::vector<int64_t> labels;
  for (int64_t b = 0; b < n; ++b) {
    const int64_t i = indices[static_cast<size_t>(b)];
    TESSERA_CHECK_INDEX(i >= 0 && i < size(), "[image] index ", i, " of ", size());
    const std::string& file = files_[static_cast<size_t>(i)];
    Tensor image = read_png(file, channels_);
    if (image.shape() != image_shape())
      throw IoError("[image] " + file + " is " + shape_str(image.shape()) + " (C, H, W); the folder's images are " +
                    shape_str(image_shape()) + ": resize them to one size first");
    std::copy(image.data<float>(), image.data<float>() + plane, inputs.data<float>() + b * plane);
    labels.push_back(labels_[static_cast<size_t>(i)]);
  }
  return {inputs, from_vector(labels, {n})};
}

std::shared_ptr<ImageFolderDataset> load_image_folder(const std::string& root, const ImageFolderOptions& o) {
  if (!fs::is_directory(root)) throw IoError("[image] " + root + " is not a directory");
  std::vector<std::string> classes;
  for (const auto& e : fs::directory_iterator(root))
    if (e.is_directory()) classes.push_back(e.path().filename().string());
  std::sort(classes.begin(), classes.end());
  if (classes.empty()) throw IoError("[image] " + root + " has no class folders (ROOT/<class>/<image>.png)");
  std::vector<std::string> files;
  std::vector<int64_t> labels;
  for (size_t c = 0; c < classes.size(); ++c) {
    std::vector<std::string> mine;
    for (const auto& e : fs::directory_iterator(fs::path(root) / classes[c]))
      if (e.is_regular_file() && is_png(e.path())) mine.push_back(e.path().string());
    std::sort(mine.begin(), mine.end());
    for (auto& f : mine) files.push_back(f), labels.push_back(static_cast<int64_t>(c));
  }
  if (files.empty()) throw IoError("[image] " + root + "'s class folders hold no .png image");
  // The first image fixes the shape every other must have (checked as each is decoded).
  const Tensor first = read_png(files.front(), o.channels);
  return std::make_shared<ImageFolderDataset>(std::move(files), std::move(labels), std::move(classes), first.shape()[0],
                                              first.shape()[1], first.shape()[2]);
}

}  // namespace tessera::data
