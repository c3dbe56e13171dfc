// Tables of numbers in CSV files (Spark MLlib's and Dask's usual input): numeric feature columns and
// a label column chosen by name. Several files (a data set split into partitions) are read as one
// table in the order given, or each rank reads its own (csv_partition_of).
//
//   x1,x2,x3,label        header: column names (or none: columns "0", "1", ..., label by index)
//   0.5,1.2,-3,1
//
// Every value must parse as a number; an empty field, "NA", "nan" or text is an IoError naming the
// file, line and column (missing values are refused, never silently zero). Classification labels
// are integers in [0, classes); regression labels any number.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tessera/data/dataset.h"

namespace tessera::data {

struct CsvOptions {
  std::string label = "label";  // the label column's name (with header = false: its index, "0", "1", ...)
  bool header = true;
  char delimiter = ',';
  bool regression = false;      // labels float32 (N, 1) instead of int64 class ids (N)
};

struct CsvTable {
  std::vector<std::string> feature_columns;
  std::shared_ptr<TensorDataset> data;  // inputs float32 (N, features), targets as CsvOptions says
  int64_t classes = 0;                  // classification: the largest label + 1
};

// All `paths`, in order, as one table; every file must have the same columns.
CsvTable load_csv(const std::vector<std::string>& paths, const CsvOptions& options = {});

// A file, or every *.csv of a directory in name order (the partitions of one table).
std::vector<std::string> csv_files(const std::string& file_or_directory);

// The files of partition `rank` of `world`: files i with i mod world == rank (each rank reads only
// its own, as Spark's and Dask's partitions are).
std::vector<std::string> csv_partition_of(const std::vector<std::string>& paths, int rank, int world);

}  // namespace tessera::data
