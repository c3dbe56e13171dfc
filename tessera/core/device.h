// Where a tensor's storage lives. Only the CPU is implemented; a CUDA device plugs in through the
// allocator in storage.cpp without callers changing.
#pragma once
#include <string>

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

}  // namespace tessera
