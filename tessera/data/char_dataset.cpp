#include "tessera/data/char_dataset.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>

namespace tessera::data {

namespace fs = std::filesystem;

namespace {

std::string describe_byte(unsigned char c) {
  char buf[16];
  if (c >= 0x20 && c < 0x7f) std::snprintf(buf, sizeof buf, "'%c' (0x%02x)", c, c);
  else std::snprintf(buf, sizeof buf, "0x%02x", c);
  return buf;
}

std::string read_file(const fs::path& path) {
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!f) throw IoError(detail::concat("[text] cannot open ", path.string(), ": ", std::strerror(errno)));
  std::string text;
  char buf[1 << 16];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f.get())) > 0) text.append(buf, n);
  if (std::ferror(f.get())) throw IoError(detail::concat("[text] error reading ", path.string()));
  return text;
}

}  // namespace

// ---- Vocabulary ----

Vocabulary::Vocabulary(const std::string& text) {
  TESSERA_CHECK(!text.empty(), "[Vocabulary] cannot build a vocabulary from an empty text");
  bool seen[256] = {};
  for (unsigned char c : text) seen[c] = true;
  for (int c = 0; c < 256; ++c)
    if (seen[c]) symbols_.push_back(static_cast<char>(c));
  build_index();
}

void Vocabulary::build_index() {
  std::fill(std::begin(id_of_), std::end(id_of_), int16_t{-1});
  for (size_t i = 0; i < symbols_.size(); ++i) id_of_[static_cast<unsigned char>(symbols_[i])] = static_cast<int16_t>(i);
}

std::vector<int64_t> Vocabulary::encode(const std::string& text) const {
  std::vector<int64_t> ids(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    TESSERA_CHECK(id_of_[c] >= 0, "[Vocabulary] byte ", describe_byte(c), " at position ", i,
                  " is not in the vocabulary of ", size(), " symbols (built from the training text)");
    ids[i] = id_of_[c];
  }
  return ids;
}

std::string Vocabulary::decode(const std::vector<int64_t>& ids) const {
  std::string text(ids.size(), '\0');
  for (size_t i = 0; i < ids.size(); ++i) {
    TESSERA_CHECK_INDEX(ids[i] >= 0 && ids[i] < size(), "[Vocabulary] id ", ids[i], " at position ", i,
                        " is outside the vocabulary of ", size(), " symbols");
    text[i] = symbols_[static_cast<size_t>(ids[i])];
  }
  return text;
}

std::string Vocabulary::to_string() const {
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : symbols_) out += {kHex[c >> 4], kHex[c & 15]};
  return out;
}

Vocabulary Vocabulary::from_string(const std::string& stored) {
  auto nibble = [&](char h) -> int {
    if (h >= '0' && h <= '9') return h - '0';
    if (h >= 'a' && h <= 'f') return h - 'a' + 10;
    throw ValueError(detail::concat("[Vocabulary] stored vocabulary has the non-hex character '", h, "'"));
  };
  TESSERA_CHECK(!stored.empty() && stored.size() % 2 == 0, "[Vocabulary] a stored vocabulary is a non-empty even-length "
                "hex string, got ", stored.size(), " characters");
  Vocabulary v;
  for (size_t i = 0; i < stored.size(); i += 2) {
    const int c = nibble(stored[i]) * 16 + nibble(stored[i + 1]);
    TESSERA_CHECK(v.symbols_.empty() || c > static_cast<unsigned char>(v.symbols_.back()),
                  "[Vocabulary] stored vocabulary is not sorted and distinct at byte ", describe_byte(static_cast<unsigned char>(c)));
    v.symbols_.push_back(static_cast<char>(c));
  }
  v.build_index();
  return v;
}

// ---- corpus ----

std::string read_text_corpus(const std::string& path) {
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (!fs::exists(st))
    throw IoError(detail::concat("[text] corpus ", path, " does not exist; set data.path to a text file or a directory "
                                 "of them (e.g. /usr/share/games/fortunes from `apt-get install fortunes`)"));
  std::string text;
  if (fs::is_directory(st)) {
    std::vector<fs::path> files;
    for (const auto& entry : fs::directory_iterator(path, ec)) {
      const std::string name = entry.path().filename().string();
      if (name.find('.') == std::string::npos && entry.is_regular_file()) files.push_back(entry.path());
    }
    if (ec) throw IoError(detail::concat("[text] cannot list ", path, ": ", ec.message()));
    std::sort(files.begin(), files.end());
    for (const auto& f : files) {
      text += read_file(f);
      if (!text.empty() && text.back() != '\n') text += '\n';  // a file never runs into the next one's line
    }
    if (text.empty())
      throw IoError(detail::concat("[text] directory ", path, " holds no text: its regular files without a dot in the "
                                   "name (the fortune-file convention) are ", files.empty() ? "absent" : "all empty"));
  } else {
    text = read_file(path);
    if (text.empty()) throw IoError(detail::concat("[text] corpus ", path, " is empty"));
  }
  return text;
}

// ---- CharDataset ----

CharDataset::CharDataset(std::vector<int64_t> ids, int64_t context, int64_t stride)
    : ids_(std::move(ids)), context_(context), stride_(stride == 0 ? context : stride) {
  TESSERA_CHECK(context >= 1, "[CharDataset] context must be >= 1, got ", context);
  TESSERA_CHECK(stride >= 0, "[CharDataset] stride must be >= 0 (0: the context), got ", stride);
  const int64_t n = static_cast<int64_t>(ids_.size());
  // A window needs T + 1 ids: T inputs and the target shifted by one.
  size_ = n >= context_ + 1 ? (n - context_ - 1) / stride_ + 1 : 0;
}

Batch CharDataset::get_batch(const std::vector<int64_t>& indices) const {
  const int64_t b = static_cast<int64_t>(indices.size());
  Tensor inputs = Tensor::empty({b, context_}, DType::Int64);   // (B, T)
  Tensor targets = Tensor::empty({b, context_}, DType::Int64);  // (B, T)
  int64_t* x = inputs.data<int64_t>();
  int64_t* y = targets.data<int64_t>();
  const size_t row_bytes = static_cast<size_t>(context_) * sizeof(int64_t);
  for (int64_t i = 0; i < b; ++i) {
    const int64_t k = indices[static_cast<size_t>(i)];
    TESSERA_CHECK_INDEX(k >= 0 && k < size_, "[CharDataset] sample index ", k, " (position ", i,
                        " of the batch) is out of range for a dataset of ", size_, " windows");
    const int64_t* s = ids_.data() + k * stride_;
    std::memcpy(x + i * context_, s, row_bytes);
    std::memcpy(y + i * context_, s + 1, row_bytes);
  }
  return {inputs, targets};
}

CharSplit split_char_corpus(const std::string& text, int64_t context, double val_fraction) {
  TESSERA_CHECK(val_fraction >= 0.0 && val_fraction < 1.0, "[split_char_corpus] val_fraction must be in [0, 1), got ",
                val_fraction);
  TESSERA_CHECK(context >= 1, "[split_char_corpus] context must be >= 1, got ", context);
  CharSplit split;
  split.vocabulary = std::make_shared<Vocabulary>(text);
  std::vector<int64_t> ids = split.vocabulary->encode(text);
  const int64_t n = static_cast<int64_t>(ids.size());
  const int64_t n_val = static_cast<int64_t>(std::floor(static_cast<double>(n) * val_fraction));
  const int64_t n_train = n - n_val;
  TESSERA_CHECK(n_train >= context + 1, "[split_char_corpus] the training part has ", n_train,
                " characters, fewer than context + 1 = ", context + 1, "; use a larger corpus or a smaller context");
  TESSERA_CHECK(val_fraction == 0.0 || n_val >= context + 1, "[split_char_corpus] the validation part (val_fraction ",
                val_fraction, " of ", n, " characters) has ", n_val, " characters, fewer than context + 1 = ",
                context + 1, "; raise val_fraction or lower the context");
  split.validation = std::make_shared<CharDataset>(std::vector<int64_t>(ids.begin() + n_train, ids.end()), context);
  ids.resize(static_cast<size_t>(n_train));
  split.train = std::make_shared<CharDataset>(std::move(ids), context);
  return split;
}

}  // namespace tessera::data
