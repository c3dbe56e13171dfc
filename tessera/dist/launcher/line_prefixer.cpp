#include "tessera/dist/launcher/line_prefixer.h"

#include <cstring>

#include "tessera/dist/launcher/fd.h"

namespace tessera::dist::launcher {

void LinePrefixer::write(const char* data, size_t size) {
  while (size > 0) {
    const char* newline = static_cast<const char*>(std::memchr(data, '\n', size));
    if (newline == nullptr) {
      partial_.append(data, size);
      if (partial_.size() >= kMaxLine) finish();
      return;
    }
    size_t length = static_cast<size_t>(newline - data);
    if (partial_.empty()) {
      emit(data, length);
    } else {
      partial_.append(data, length);
      emit(partial_.data(), partial_.size());
      partial_.clear();
    }
    data = newline + 1;
    size -= length + 1;
  }
}

void LinePrefixer::finish() {
  if (partial_.empty()) return;
  emit(partial_.data(), partial_.size());
  partial_.clear();
}

void LinePrefixer::emit(const char* line, size_t size) {
  scratch_.assign(prefix_);
  scratch_.append(line, size);
  scratch_ += '\n';
  detail::write_all(out_fd_, scratch_.data(), scratch_.size());
}

}  // namespace tessera::dist::launcher
