// Images on disk, one folder per class (torchvision's ImageFolder), for training on one's own
// pictures:
//
//   ROOT/cat/0001.png   ROOT/cat/0002.png   ROOT/dog/0001.png ...
//
// Class ids are the folders' names in sorted order. Images are PNG (Debian's libpng, its simplified
// png_image API) and decoded when a batch asks for them, so a set far larger than memory trains;
// the DistributedSampler shards it like any other Dataset. Every image must have the size and the
// channels of the first (or of the options): a different one, a file that is not a PNG, or a
// truncated one is an IoError naming the file.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tessera/data/dataset.h"

namespace tessera::data {

struct ImageFolderOptions {
  int64_t channels = 0;  // 1 (gray) or 3 (RGB); 0: 1 if the first image is gray, else 3
};

class ImageFolderDataset : public Dataset {
 public:
  ImageFolderDataset(std::vector<std::string> files, std::vector<int64_t> labels, std::vector<std::string> classes,
                     int64_t channels, int64_t height, int64_t width);
  int64_t size() const override { return static_cast<int64_t>(files_.size()); }
  // inputs float32 (B, C, H, W) in [0, 1], targets int64 (B).
  Batch get_batch(const std::vector<int64_t>& indices) const override;
  const std::vector<std::string>& classes() const { return classes_; }
  Shape image_shape() const { return {channels_, height_, width_}; }

 private:
  std::vector<std::string> files_;
  std::vector<int64_t> labels_;
  std::vector<std::string> classes_;
  int64_t channels_, height_, width_;
};

std::shared_ptr<ImageFolderDataset> load_image_folder(const std::string& root, const ImageFolderOptions& options = {});

// One PNG as float32 (C, H, W) in [0, 1], converted to `channels` (1 or 3; 0: as stored, gray or RGB).
Tensor read_png(const std::string& path, int64_t channels = 0);
// Writes (C, H, W) values in [0, 1] (C = 1 or 3) as an 8-bit PNG.
void write_png(const std::string& path, const Tensor& image);

}  // namespace tessera::data
