#include "tessera/data/csv.h"

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "tessera/core/error.h"
#include "tessera/data/csv_row.h"
#include "tessera/ops/ops.h"

namespace tessera::data {

CsvTable load_csv(const std::vector<std::string>& paths, const CsvOptions& o) {
  TESSERA_CHECK(!paths.empty(), "[csv] no files to read");
  CsvTable table;
  CsvColumns columns;  // of the first file; every other must match
  std::vector<float> features, labels;
  for (const std::string& path : paths) {
    std::ifstream in(path);
    if (!in) throw IoError("[csv] cannot open " + path);
    std::string line;
    int64_t number_of_line = 0;
    auto where = [&](const std::string& why) {
      return IoError(detail::concat("[csv] ", path, ":", number_of_line, ": ", why));
    };
    bool first_line = true;
    while (std::getline(in, line)) {
      ++number_of_line;
      if (csv_blank(line)) continue;
      if (first_line) {
        first_line = false;
        CsvColumns file_columns;
        if (std::string why = csv_columns(line, o, file_columns); !why.empty()) throw where(why);
        if (columns.names.empty()) columns = file_columns;
        if (file_columns.names != columns.names)
          throw where(o.header ? "its columns differ from " + paths.front() + "'s"
                               : detail::concat(file_columns.names.size(), " columns, ", paths.front(), " has ",
                                                columns.names.size()));
        if (o.header) continue;
      }
      float label = 0;
      if (std::string why = csv_parse_row(line, columns, o, 0, features, label); !why.empty()) throw where(why);
      if (!o.regression) table.classes = std::max<int64_t>(table.classes, static_cast<int64_t>(label) + 1);
      labels.push_back(label);
    }
  }
  table.feature_columns = columns.feature_names();
  const int64_t n = static_cast<int64_t>(labels.size());
  if (n == 0) throw IoError("[csv] " + paths.front() + (paths.size() > 1 ? " and the others" : "") + " hold no rows");
  const int64_t f = static_cast<int64_t>(table.feature_columns.size());
  Tensor inputs = from_vector(features, {n, f});
  Tensor targets;
  if (o.regression) {
    targets = from_vector(labels, {n, 1});
  } else {
    std::vector<int64_t> ids(labels.begin(), labels.end());
    targets = from_vector(ids, {n});
  }
  table.data = std::make_shared<TensorDataset>(inputs, targets);
  return table;
}

std::vector<std::string> csv_files(const std::string& where) {
  namespace fs = std::filesystem;
  if (!fs::is_directory(where)) {
    if (!fs::exists(where)) throw IoError("[csv] no file or directory " + where);
    return {where};
  }
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(where))
    if (e.path().extension() == ".csv") out.push_back(e.path().string());
  std::sort(out.begin(), out.end());
  if (out.empty()) throw IoError("[csv] " + where + " holds no *.csv file");
  return out;
}

std::vector<std::string> csv_partition_of(const std::vector<std::string>& paths, int rank, int world) {
  TESSERA_CHECK(world >= 1 && rank >= 0 && rank < world, "[csv] rank ", rank, " of ", world);
  TESSERA_CHECK(static_cast<int>(paths.size()) >= world, "[csv] ", paths.size(), " files cannot give each of ", world,
                " ranks a partition");
  std::vector<std::string> mine;
  for (size_t i = static_cast<size_t>(rank); i < paths.size(); i += static_cast<size_t>(world)) mine.push_back(paths[i]);
  return mine;
}

}  // namespace tessera::data
