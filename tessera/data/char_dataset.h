// Character-level language-model data: a byte vocabulary, a text corpus reader and a dataset of
// (context, next-character) windows, as in char-rnn and nanoGPT's shakespeare_char.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tessera/data/dataset.h"

namespace tessera::data {

// The sorted distinct bytes of a text; id i is the i-th smallest. Bytes, not Unicode characters: a
// UTF-8 text round-trips through encode/decode and the model learns the multi-byte sequences.
class Vocabulary {
 public:
  explicit Vocabulary(const std::string& text);
  int64_t size() const { return static_cast<int64_t>(symbols_.size()); }
  // Unknown byte: ValueError naming it.
  std::vector<int64_t> encode(const std::string& text) const;
  // Id outside [0, size()): IndexError.
  std::string decode(const std::vector<int64_t>& ids) const;
  const std::string& symbols() const { return symbols_; }
  // For a checkpoint's string metadata, which is JSON and so must be valid UTF-8: the symbols as hex
  // ("0a20616263...") since a byte vocabulary holds lone UTF-8 continuation bytes.
  std::string to_string() const;
  static Vocabulary from_string(const std::string& stored);  // ValueError if malformed

 private:
  Vocabulary() = default;
  std::string symbols_;  // sorted, distinct
  int16_t id_of_[256];   // -1 for bytes not in the vocabulary
  void build_index();
};

// A file's bytes; or, for a directory, its regular files without a dot in the name concatenated in
// sorted name order — the fortune-file convention, which skips the .dat indexes and .u8 links of
// /usr/share/games/fortunes. IoError naming the path if it is missing or yields no text.
std::string read_text_corpus(const std::string& path);

// Sample i is the window starting at s = i * stride: inputs ids[s, s + T), targets ids[s + 1, s + T + 1),
// both int64 (T); batches are (B, T).
class CharDataset : public Dataset {
 public:
  // stride 0 means stride = context (non-overlapping windows).
  CharDataset(std::vector<int64_t> ids, int64_t context, int64_t stride = 0);
  int64_t size() const override { return size_; }
  Batch get_batch(const std::vector<int64_t>& indices) const override;
  int64_t context() const { return context_; }
  int64_t stride() const { return stride_; }
  const std::vector<int64_t>& ids() const { return ids_; }

 private:
  std::vector<int64_t> ids_;
  int64_t context_, stride_, size_;
};

struct CharSplit {
  std::shared_ptr<Vocabulary> vocabulary;  // of the whole text, shared by both parts
  std::shared_ptr<CharDataset> train;      // the first (1 - val_fraction) of the text
  std::shared_ptr<CharDataset> validation; // the rest (empty when val_fraction is 0)
};
// A contiguous split (not random windows) so no validation text leaks into training windows.
// ValueError when a non-empty part is shorter than context + 1 characters.
CharSplit split_char_corpus(const std::string& text, int64_t context, double val_fraction = 0.1);

}  // namespace tessera::data
