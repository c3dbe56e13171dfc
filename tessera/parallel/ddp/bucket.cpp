#include "tessera/parallel/ddp/bucket.h"

namespace tessera::parallel::ddp {

std::vector<std::vector<size_t>> assign_buckets(const std::vector<size_t>& order, const std::vector<size_t>& bytes,
                                                size_t first_cap_bytes, size_t cap_bytes) {
  std::vector<std::vector<size_t>> buckets;
  std::vector<size_t> current;
  size_t filled = 0;
  for (size_t index : order) {
    size_t cap = buckets.empty() ? first_cap_bytes : cap_bytes;
    if (!current.empty() && filled + bytes[index] > cap) {
      buckets.push_back(std::move(current));
      current.clear();
      filled = 0;
    }
    current.push_back(index);
    filled += bytes[index];
  }
  if (!current.empty()) buckets.push_back(std::move(current));
  return buckets;
}

}  // namespace tessera::parallel::ddp
