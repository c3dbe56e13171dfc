// Gradient buckets: parameters grouped, in the order their gradients are expected to become ready,
// into flat buffers of bounded size, so that one all-reduce moves many small gradients and the
// first buckets can start while backward is still running (PyTorch DDP's policy: a small first
// bucket, 1 MiB, so communication starts early; then 25 MiB each).
#pragma once
#include <cstddef>
#include <vector>

namespace tessera::parallel::ddp {

// Splits `order` (parameter indices, earliest-ready first) into buckets: the first holds up to
// `first_cap_bytes`, later ones up to `cap_bytes`; a parameter larger than the cap gets a bucket of
// its own. bytes[i] is parameter i's gradient size.
std::vector<std::vector<size_t>> assign_buckets(const std::vector<size_t>& order, const std::vector<size_t>& bytes,
                                                size_t first_cap_bytes, size_t cap_bytes);

}  // namespace tessera::parallel::ddp
