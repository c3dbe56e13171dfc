// Seeded random numbers. A Generator is a Philox-free, portable stream: mt19937_64 for bits and our
// own uniform/normal transforms, so a seed gives the same tensors on every platform and library version
// (std::normal_distribution is implementation-defined).
#pragma once
#include <cstdint>
#include <random>
#include <string>

namespace tessera {

// splitmix64's finaliser: decorrelates nearby seeds (seed and seed + 1, or (seed, epoch) and
// (seed + 1, epoch - 1)) before they seed a generator.
inline uint64_t mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

class Generator {
 public:
  explicit Generator(uint64_t seed = 0) : engine_(seed) {}
  void seed(uint64_t s) { engine_.seed(s); has_spare_ = false; }
  uint64_t next_u64() { return engine_(); }
  // Uniform in [0, 1).
  float uniform() { return static_cast<float>((engine_() >> 40) * (1.0 / 16777216.0)); }
  float normal();
  // The whole stream position as text (checkpoints store it so a resumed run draws the same numbers).
  std::string state() const;
  void set_state(const std::string& state);

 private:
  std::mt19937_64 engine_;
  bool has_spare_ = false;
  float spare_ = 0;
};

// The process-wide generator used when an op is not given one.
Generator& default_generator();
void manual_seed(uint64_t seed);

}  // namespace tessera
