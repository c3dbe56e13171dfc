#include "tessera/data/csv.h"

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <optional>
#include <cmath>
#include <cstdlib>
#include <fstream>

#include "tessera/core/error.h"
#include "tessera/ops/ops.h"

namespace tessera::data {

namespace {

std::vector<std::string> split_fields(const std::string& line, char delimiter) {
  std::vector<std::string> out(1);
  for (char c : line) {
    if (c == delimiter)
      out.emplace_back();
    else if (c != '\r')
      out.back() += c;
  }
  return out;
}

std::string trimmed(const std::string& s) {
  const size_t a = s.find_first_not_of(" \t"), b = s.find_last_not_of(" \t");
  return a == std::string::npos ? "" : s.substr(a, b - a + 1);
}

// The whole field as a finite number, or nullopt (empty, NA, nan, inf, text, trailing garbage).
std::optional<double> number(const std::string& field) {
  const std::string s = trimmed(field);
  if (s.empty()) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (end != s.c_str() + s.size() || errno == ERANGE || !std::isfinite(v)) return std::nullopt;
  return v;
}

}  // namespace

CsvTable load_csv(const std::vector<std::string>& paths, const CsvOptions& o) {
  TESSERA_CHECK(!paths.empty(), "[csv] no files to read");
  CsvTable table;
  std::vector<std::string> columns;  // of the first file; every other must match
  int64_t label_index = -1;
  std::vector<float> features, labels;
  for (const std::string& path : paths) {
    std::ifstream in(path);
    if (!in) throw IoError("[csv] cannot open " + path);
    std::string line;
    int64_t number_of_line = 0;
    auto where = [&](const std::string& why) {
      return IoError(detail::concat("[csv] ", path, ":", number_of_line, ": ", why));
    };
    std::vector<std::string> file_columns;
    while (std::getline(in, line)) {
      ++number_of_line;
      if (trimmed(line).empty()) continue;
      std::vector<std::string> fields = split_fields(line, o.delimiter);
      if (line.find('"') != std::string::npos) throw where("quoted fields are not supported (numbers only)");
      if (file_columns.empty()) {
        if (o.header) {
          for (auto& f : fields) file_columns.push_back(trimmed(f));
          if (columns.empty()) columns = file_columns;
          if (file_columns != columns) throw where("its columns differ from " + paths.front() + "'s");
          continue;
        }
        for (size_t i = 0; i < fields.size(); ++i) file_columns.push_back(std::to_string(i));
        if (columns.empty()) columns = file_columns;
        if (file_columns != columns)
          throw where(detail::concat(fields.size(), " columns, ", paths.front(), " has ", columns.size()));
      }
      if (label_index < 0) {
        for (size_t i = 0; i < columns.size(); ++i)
          if (columns[i] == o.label) label_index = static_cast<int64_t>(i);
        if (label_index < 0) throw where("no label column \"" + o.label + "\"");
        TESSERA_CHECK(columns.size() >= 2, "[csv] ", path, ": a table needs a label and at least one feature");
        for (size_t i = 0; i < columns.size(); ++i)
          if (static_cast<int64_t>(i) != label_index) table.feature_columns.push_back(columns[i]);
      }
      if (fields.size() != columns.size())
        throw where(detail::concat(fields.size(), " fields, the header has ", columns.size()));
      for (size_t i = 0; i < fields.size(); ++i) {
        const std::optional<double> v = number(fields[i]);
        if (!v)
          throw where("column \"" + columns[i] + "\" holds \"" + trimmed(fields[i]) +
                      "\", not a number (missing values are refused: fill or drop them first)");
        if (static_cast<int64_t>(i) != label_index) {
          features.push_back(static_cast<float>(*v));
          continue;
        }
        if (!o.regression) {
          if (*v < 0 || *v != std::floor(*v) || *v > 1e6)
            throw where(detail::concat("label ", trimmed(fields[i]), " is not a class id (an integer in [0, 1e6])"));
          table.classes = std::max<int64_t>(table.classes, static_cast<int64_t>(*v) + 1);
        }
        labels.push_back(static_cast<float>(*v));
      }
    }
  }
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
