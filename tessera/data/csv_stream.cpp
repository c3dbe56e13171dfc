#include "tessera/data/csv_stream.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string_view>

#include "tessera/core/error.h"

namespace tessera::data {

namespace {

constexpr int64_t kReadChunk = int64_t{1} << 20;

// Reads [offset, offset + n) of `fd` (fewer bytes at the end of the file); an error names the file.
int64_t read_at(int fd, const std::string& path, char* out, int64_t n, int64_t offset) {
  int64_t done = 0;
  while (done < n) {
    const ssize_t got = ::pread(fd, out + done, static_cast<size_t>(n - done), offset + done);
    if (got < 0) {
      if (errno == EINTR) continue;
      throw IoError(detail::concat("[csv] reading ", path, " at byte ", offset + done, ": ", std::strerror(errno)));
    }
    if (got == 0) break;
    done += got;
  }
  return done;
}

// The lines of a file from an offset, read a chunk at a time: line(), then advance(). A line longer
// than StreamingCsv::kMaxLineBytes is refused rather than buffered without bound.
class LineReader {
 public:
  LineReader(int fd, const std::string& path, int64_t offset) : fd_(fd), path_(path), buffer_offset_(offset) {}

  // The next line (without its '\n') and its offset, or false at the end of the file.
  bool next(std::string_view& line, int64_t& offset) {
    for (;;) {
      const char* begin = buffer_.data() + at_;
      const void* newline = std::memchr(begin, '\n', have_ - at_);
      if (newline != nullptr || eof_) {
        if (newline == nullptr && at_ == have_) return false;
        const size_t length = newline ? static_cast<const char*>(newline) - begin : have_ - at_;
        line = std::string_view(begin, length);
        offset = buffer_offset_ + static_cast<int64_t>(at_);
        at_ += length + (newline ? 1 : 0);
        return true;
      }
      if (static_cast<int64_t>(have_ - at_) > StreamingCsv::kMaxLineBytes)
        throw IoError(detail::concat("[csv] ", path_, ": the line at byte ", buffer_offset_ + static_cast<int64_t>(at_),
                                     " is longer than ", StreamingCsv::kMaxLineBytes, " bytes"));
      fill();
    }
  }
  // The offset just past the last line returned.
  int64_t position() const { return buffer_offset_ + static_cast<int64_t>(at_); }

 private:
  void fill() {
    buffer_.erase(0, at_);
    buffer_offset_ += static_cast<int64_t>(at_);
    have_ -= at_;
    at_ = 0;
    buffer_.resize(have_ + kReadChunk);
    const int64_t got = read_at(fd_, path_, buffer_.data() + have_, kReadChunk, buffer_offset_ + static_cast<int64_t>(have_));
    have_ += static_cast<size_t>(got);
    eof_ = got == 0;
  }

  int fd_;
  const std::string& path_;
  int64_t buffer_offset_;
  std::string buffer_;
  size_t have_ = 0, at_ = 0;
  bool eof_ = false;
};

}  // namespace

StreamingCsv::StreamingCsv(std::vector<std::string> paths, CsvOptions options, int64_t max_classes)
    : options_(std::move(options)), max_classes_(max_classes) {
  TESSERA_CHECK(!paths.empty(), "[csv] no files to read");
  try {
    open_files(std::move(paths));
  } catch (...) {  // the destructor does not run for a half-built object: close what was opened
    for (File& f : files_)
      if (f.fd >= 0) ::close(f.fd);
    throw;
  }
}

void StreamingCsv::open_files(std::vector<std::string> paths) {
  files_.reserve(paths.size());
  for (std::string& path : paths) {
    File& f = files_.emplace_back();
    f.path = std::move(path);
    f.fd = ::open(f.path.c_str(), O_RDONLY | O_CLOEXEC);
    if (f.fd < 0) throw IoError("[csv] cannot open " + f.path + ": " + std::strerror(errno));
    struct stat st {};
    if (::fstat(f.fd, &st) != 0) throw IoError("[csv] cannot stat " + f.path + ": " + std::strerror(errno));
    f.end = st.st_size;
    f.modified_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
    // The first line that is not blank: the header (or, without one, the first row: it sets the columns).
    LineReader lines(f.fd, f.path, 0);
    std::string_view line;
    int64_t offset = 0, number = 0;
    bool found = false;
    while (lines.next(line, offset)) {
      ++number;
      if (!csv_blank(line)) {
        found = true;
        break;
      }
    }
    if (!found) {  // nothing but blanks: a partition without rows
      f.data_begin = f.end;
      continue;
    }
    CsvColumns columns;
    if (std::string why = csv_columns(line, options_, columns); !why.empty())
      throw IoError(detail::concat("[csv] ", f.path, ":", number, ": ", why));
    if (columns_.names.empty()) columns_ = columns;
    if (columns.names != columns_.names)
      throw IoError(detail::concat("[csv] ", f.path, ":", number, ": ",
                                   options_.header ? "its columns differ from " + files_.front().path + "'s"
                                                   : detail::concat(columns.names.size(), " columns, ",
                                                                    files_.front().path, " has ", columns_.names.size())));
    f.data_begin = options_.header ? lines.position() : 0;
  }
  if (columns_.names.empty()) throw IoError("[csv] " + files_.front().path + (files_.size() > 1 ? " and the others" : "") + " hold no rows");
  feature_columns_ = columns_.feature_names();
}

StreamingCsv::~StreamingCsv() {
  for (File& f : files_)
    if (f.fd >= 0) ::close(f.fd);
}

int64_t StreamingCsv::table_bytes() const {
  int64_t total = 0;
  for (const File& f : files_) total += f.end - f.data_begin;
  return total;
}

void StreamingCsv::select_share(int index, int count) {
  TESSERA_CHECK(count >= 1 && index >= 0 && index < count, "[csv] share ", index, " of ", count);
  const auto total = static_cast<__int128>(table_bytes());
  const auto low = static_cast<int64_t>(total * index / count), high = static_cast<int64_t>(total * (index + 1) / count);
  rows_ = 0;
  int64_t table_offset = 0;  // of this file's first row byte in the table
  for (File& f : files_) {
    f.first_row = rows_;
    f.rows = 0;
    f.base.clear();
    f.step.clear();
    f.rows_end = f.data_begin;
    const int64_t file_low = table_offset, file_high = table_offset + (f.end - f.data_begin);
    const int64_t from = std::max(low, file_low), to = std::min(high, file_high);
    if (from < to) scan(f, f.data_begin + (from - file_low), f.data_begin + (to - file_low));
    rows_ += f.rows;
    table_offset = file_high;
  }
  selected_ = true;
}

// Indexes (and checks) the rows of `file` that start in [from, to).
void StreamingCsv::scan(File& file, int64_t from, int64_t to) {
  int64_t start = from;
  if (from > file.data_begin) {  // inside the rows: a row starts here only if the byte before ends a line
    char before = 0;
    read_at(file.fd, file.path, &before, 1, from - 1);
    if (before != '\n') {
      LineReader skip(file.fd, file.path, from);
      std::string_view rest;
      int64_t at = 0;
      if (!skip.next(rest, at)) return;
      start = skip.position();  // the row that started before `from` is the previous share's
    }
  }
  LineReader lines(file.fd, file.path, start);
  std::string_view line;
  int64_t offset = 0;
  std::vector<float> features;
  float label = 0;
  while (lines.next(line, offset) && offset < to) {
    if (csv_blank(line)) continue;
    features.clear();
    if (std::string why = csv_parse_row(line, columns_, options_, max_classes_, features, label); !why.empty())
      refuse_row(file, offset, why);
    if (file.rows % kRowsPerBase == 0) file.base.push_back(offset);
    // 1024 rows of at most 1 MiB span less than 4 GiB; only gigabytes of blank lines could not.
    if (offset - file.base.back() > int64_t{UINT32_MAX})
      refuse_row(file, offset, "4 GiB of blank lines within 1024 rows: remove them");
    file.step.push_back(static_cast<uint32_t>(offset - file.base.back()));
    ++file.rows;
    file.rows_end = lines.position();
  }
}

int64_t StreamingCsv::File::offset_of(int64_t row) const {
  return row == rows ? rows_end : base[static_cast<size_t>(row / kRowsPerBase)] + step[static_cast<size_t>(row)];
}

// A file whose size or modification time moved since it was opened may hold other rows where the
// index points: refused, never read.
void StreamingCsv::check_unchanged(const File& file) const {
  struct stat st {};
  if (::fstat(file.fd, &st) != 0) throw IoError("[csv] cannot stat " + file.path + ": " + std::strerror(errno));
  const int64_t modified = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  if (st.st_size != file.end || modified != file.modified_ns)
    throw IoError(detail::concat("[csv] ", file.path, " changed after it was scanned (", file.end, " bytes then, ",
                                 static_cast<int64_t>(st.st_size), " now, or a new modification time): scan it again"));
}

void StreamingCsv::refuse_row(const File& file, int64_t offset, const std::string& why) const {
  // The line number is counted only now, from the start of the file: a share that starts deep in a
  // file does not know it, and counting every share's prefix up front would read the table twice.
  int64_t line = 1;
  std::string chunk(static_cast<size_t>(kReadChunk), '\0');
  for (int64_t at = 0; at < offset;) {
    const int64_t got = read_at(file.fd, file.path, chunk.data(), std::min(kReadChunk, offset - at), at);
    if (got == 0) break;
    line += std::count(chunk.data(), chunk.data() + got, '\n');
    at += got;
  }
  throw IoError(detail::concat("[csv] ", file.path, ":", line, ": ", why));
}

Batch StreamingCsv::get_batch(const std::vector<int64_t>& indices) const {
  TESSERA_CHECK(selected_, "[csv] select_share before reading a StreamingCsv");
  const auto n = static_cast<int64_t>(indices.size());
  const auto width = static_cast<int64_t>(feature_columns_.size());
  Tensor inputs = Tensor::empty({n, width}, DType::Float32);
  Tensor targets = options_.regression ? Tensor::empty({n, 1}, DType::Float32) : Tensor::empty({n}, DType::Int64);
  // (file, row in file, place in the batch), sorted so that each block is read once.
  struct Want {
    size_t file;
    int64_t row, place;
  };
  std::vector<Want> wants;
  wants.reserve(indices.size());
  for (int64_t place = 0; place < n; ++place) {
    const int64_t i = indices[static_cast<size_t>(place)];
    TESSERA_CHECK_INDEX(i >= 0 && i < rows_, "[csv] row ", i, " of a share of ", rows_, " rows");
    const auto it = std::upper_bound(files_.begin(), files_.end(), i,
                                     [](int64_t row, const File& f) { return row < f.first_row + f.rows; });
    const auto file = static_cast<size_t>(it - files_.begin());
    wants.push_back({file, i - files_[file].first_row, place});
  }
  std::sort(wants.begin(), wants.end(),
            [](const Want& a, const Want& b) { return a.file != b.file ? a.file < b.file : a.row < b.row; });
  for (size_t w = 0; w < wants.size(); ++w)
    if (w == 0 || wants[w].file != wants[w - 1].file) check_unchanged(files_[wants[w].file]);
  float* x = inputs.data<float>();
  std::string span;
  std::vector<float> features;
  float label = 0;
  for (size_t w = 0; w < wants.size();) {
    // One read for this row and the wanted rows close after it in the same file.
    const size_t file = wants[w].file;
    const File& f = files_[file];
    const int64_t begin = f.offset_of(wants[w].row);
    size_t last = w;
    while (last + 1 < wants.size() && wants[last + 1].file == file &&
           f.offset_of(wants[last + 1].row) - f.offset_of(wants[last].row + 1) <= kMergeGapBytes &&
           f.offset_of(wants[last + 1].row + 1) - begin <= kMaxReadBytes)
      ++last;
    const int64_t end = f.offset_of(wants[last].row + 1);
    span.resize(static_cast<size_t>(end - begin));
    if (read_at(f.fd, f.path, span.data(), end - begin, begin) != end - begin)
      throw IoError(detail::concat("[csv] ", f.path, " is shorter than when it was scanned (byte ", end, ")"));
    for (; w <= last; ++w) {
      const int64_t at = f.offset_of(wants[w].row) - begin;
      const size_t newline = span.find('\n', static_cast<size_t>(at));
      const std::string_view line(span.data() + at, (newline == std::string::npos ? span.size() : newline) - static_cast<size_t>(at));
      features.clear();
      std::string why = csv_blank(line) ? "the row is blank now"
                                        : csv_parse_row(line, columns_, options_, max_classes_, features, label);
      if (!why.empty())
        throw IoError(detail::concat("[csv] ", f.path, " changed after it was scanned: the row at byte ", begin + at,
                                     ": ", why));
      const int64_t place = wants[w].place;
      std::copy(features.begin(), features.end(), x + place * width);
      if (options_.regression)
        targets.data<float>()[place] = label;
      else
        targets.data<int64_t>()[place] = static_cast<int64_t>(label);
    }
  }
  return {inputs, targets};
}

}  // namespace tessera::data
