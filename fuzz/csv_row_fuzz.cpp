// Fuzz target: a CSV table's lines as both table readers read them (data/csv_row.h). The first line
// is the header, every further line a row: each is refused with a reason or gives exactly one value
// per feature column, all finite, and a label that is a class id; never a crash or a read past the line.
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "tessera/data/csv_row.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera::data;
  std::istringstream lines(std::string(reinterpret_cast<const char*>(data), size));
  std::string header;
  std::getline(lines, header);
  CsvOptions options;
  options.header = !header.empty() && header[0] != '#';  // both ways, chosen by the input
  options.label = options.header ? "label" : "0";
  CsvColumns columns;
  if (!csv_columns(header, options, columns).empty()) return 0;
  if (columns.label_index < 0 || columns.names.size() < 2) std::abort();
  std::vector<float> features;
  for (std::string line; std::getline(lines, line);) {
    if (csv_blank(line)) continue;
    features.clear();
    float label = -1;
    const std::string why = csv_parse_row(line, columns, options, 5, features, label);
    if (!why.empty()) {
      if (!features.empty()) std::abort();  // a refused row leaves nothing behind
      continue;
    }
    if (features.size() != columns.names.size() - 1) std::abort();
    for (float v : features)
      if (!std::isfinite(v)) std::abort();
    if (label < 0 || label >= 5 || label != std::floor(label)) std::abort();
  }
  return 0;
}
