#include "tessera/core/device.h"

#include <charconv>

#include "tessera/core/error.h"

namespace tessera {

Device parse_device(std::string_view text) {
  if (text == "cpu") return cpu_device();
  if (text == "cuda") return cuda_device(0);
  if (text.substr(0, 5) == "cuda:" && text.size() > 5) {
    int index = -1;
    const auto [end, error] = std::from_chars(text.data() + 5, text.data() + text.size(), index);
    if (error == std::errc() && end == text.data() + text.size() && index >= 0) return cuda_device(index);
  }
  throw ValueError(detail::concat("[device] '", text, "' is not a device: expected cpu, cuda or cuda:N"));
}

}  // namespace tessera
