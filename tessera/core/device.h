// Where a tensor's storage lives: the CPU, or a CUDA device whose memory comes from the CUDA
// backend's allocator (core/allocator.h). A tensor on a device is never read through a host pointer.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace tessera {

enum class DeviceType : uint8_t { CPU, CUDA };

struct Device {
  DeviceType type = DeviceType::CPU;
  int index = 0;

  bool operator==(const Device&) const = default;
  bool is_cpu() const { return type == DeviceType::CPU; }
  std::string str() const {
    return type == DeviceType::CPU ? std::string("cpu") : "cuda:" + std::to_string(index);
  }
};

inline Device cpu_device() { return Device{}; }
inline Device cuda_device(int index = 0) { return Device{DeviceType::CUDA, index}; }
// "cpu", "cuda" (cuda:0) or "cuda:N", as PyTorch writes them; ValueError for anything else.
Device parse_device(std::string_view text);

}  // namespace tessera
