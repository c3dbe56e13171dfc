// A CSV table larger than memory, read where it lies: each replica takes a contiguous byte range of
// the table (the files one after another, headers aside), as Hadoop's and Spark's text splits do,
// and reads only the rows that start in it. It keeps every row's file offset (4 bytes a row: a
// 32-bit step from an 8-byte offset every 1024 rows) and reads a batch's rows from disk when the
// batch is assembled, each row alone or neighbours in one read, so its memory is the index and the
// batches in flight, whatever the table's size.
//
//   StreamingCsv table(csv_files("data/train"), options, classes);
//   table.select_share(rank, world);   // scans this rank's bytes once: checks every row, indexes them
//   DataLoader loader(table, PaddedRandomSampler(table.size(), rows_per_rank, seed), ...);
//
// Every row is checked when the share is scanned, as load_csv checks it (csv_row.h), and an error
// names the file and the line; a line over 1 MiB is refused (load_csv has no such bound). The files
// must not change afterwards: a batch that reads a file whose size or modification time moved is
// an IoError naming it, as is a row that no longer parses.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "tessera/data/csv.h"
#include "tessera/data/csv_row.h"
#include "tessera/data/dataset.h"

namespace tessera::data {

class StreamingCsv final : public PartitionedDataset {
 public:
  // Opens the files and reads their headers (they must agree); `max_classes` > 0 refuses a label
  // outside [0, max_classes) at the scan, naming its line.
  StreamingCsv(std::vector<std::string> paths, CsvOptions options, int64_t max_classes = 0);
  ~StreamingCsv() override;
  StreamingCsv(const StreamingCsv&) = delete;
  StreamingCsv& operator=(const StreamingCsv&) = delete;

  // Takes byte range [total·index/count, total·(index+1)/count) of the table's rows and scans it. A
  // row belongs to the range its first byte lies in, so the shares of 0..count-1 hold every row once.
  void select_share(int index, int count) override;
  int64_t size() const override { return rows_; }
  // Inputs float32 (n, features); targets int64 (n), or float32 (n, 1) with options.regression.
  Batch get_batch(const std::vector<int64_t>& indices) const override;

  const std::vector<std::string>& feature_columns() const { return feature_columns_; }
  // The bytes of row data in the whole table (the size of what a process would otherwise load).
  int64_t table_bytes() const;

  static constexpr int64_t kRowsPerBase = 1024;  // rows per 8-byte base offset; a step is 32 bits
  static constexpr int64_t kMaxLineBytes = int64_t{1} << 20;
  // Wanted rows share one read while the bytes between them are at most this many (a sequential
  // evaluation reads in large pieces; a random batch reads row by row: merging rows 100 KB apart
  // read 31 GB for one epoch of a 460 MB table).
  static constexpr int64_t kMergeGapBytes = 4096, kMaxReadBytes = int64_t{1} << 20;

 private:
  struct File {
    std::string path;
    int fd = -1;
    int64_t data_begin = 0, end = 0;  // row bytes: after the header, to the end of the file
    // This share's part of the file:
    int64_t first_row = 0, rows = 0;
    int64_t modified_ns = 0;           // the file's mtime when opened: a later change is refused
    std::vector<int64_t> base;         // the offset of rows 0, 1024, 2048, ... of this share in the file
    std::vector<uint32_t> step;        // each row's offset past its base
    int64_t rows_end = 0;              // the offset just past this share's last row in the file
    int64_t offset_of(int64_t row) const;
  };
  void scan(File& file, int64_t from, int64_t to);
  void check_unchanged(const File& file) const;
  void open_files(std::vector<std::string> paths);
  [[noreturn]] void refuse_row(const File& file, int64_t offset, const std::string& why) const;

  std::vector<File> files_;
  CsvOptions options_;
  int64_t max_classes_;
  CsvColumns columns_;
  std::vector<std::string> feature_columns_;
  int64_t rows_ = 0;
  bool selected_ = false;
};

}  // namespace tessera::data
