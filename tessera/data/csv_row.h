// One CSV line read the way every table reader here reads it (load_csv in memory, StreamingCsv from
// its byte ranges), so that both accept and refuse exactly the same text. The functions return the
// reason a line is refused, or ""; the caller adds the file and the line.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/data/csv.h"

namespace tessera::data {

// A table's columns: from its header, or without one "0", "1", ... from its first row.
struct CsvColumns {
  std::vector<std::string> names;
  int64_t label_index = -1;
  std::vector<std::string> feature_names() const;
};

// Whether a line holds nothing but blanks (such lines are skipped, never rows).
bool csv_blank(std::string_view line);

// The columns the first line of a table gives (its header, or its field count without one).
std::string csv_columns(std::string_view first_line, const CsvOptions& options, CsvColumns& out);

// Parses a data row: appends its feature values to `features` and sets `label`. Refuses a quote, a
// wrong number of fields, a field that is not a finite number (missing values included) and a
// classification label that is not a class id in [0, max_classes) (max_classes 0: up to 1e6).
std::string csv_parse_row(std::string_view line, const CsvColumns& columns, const CsvOptions& options,
                          int64_t max_classes, std::vector<float>& features, float& label);

}  // namespace tessera::data
