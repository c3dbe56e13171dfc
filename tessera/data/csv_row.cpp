#include "tessera/data/csv_row.h"

#include <charconv>
#include <cmath>
#include <limits>
#include <optional>

#include "tessera/core/error.h"

namespace tessera::data {

namespace {

std::string_view trim_blanks(std::string_view s) {
  const size_t a = s.find_first_not_of(" \t\r"), b = s.find_last_not_of(" \t\r");
  return a == std::string_view::npos ? std::string_view() : s.substr(a, b - a + 1);
}

// The fields of a line, without their blanks (a '\r' of a CRLF file included).
void split_line(std::string_view line, char delimiter, std::vector<std::string_view>& fields) {
  fields.clear();
  size_t start = 0;
  for (;;) {
    const size_t end = line.find(delimiter, start);
    fields.push_back(trim_blanks(line.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start)));
    if (end == std::string_view::npos) return;
    start = end + 1;
  }
}

// The whole field as a finite number, or nullopt (empty, NA, nan, inf, text, trailing garbage, out of
// range). from_chars, not strtod: no copy to a NUL-terminated string per field, and no locale.
std::optional<double> finite_number(std::string_view s) {
  if (!s.empty() && s.front() == '+') {
    s.remove_prefix(1);
    if (!s.empty() && (s.front() == '-' || s.front() == '+')) return std::nullopt;  // "+-5" is not a number
  }
  if (s.empty()) return std::nullopt;
  double v = 0;
  const auto [end, error] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (error != std::errc() || end != s.data() + s.size() || !std::isfinite(v)) return std::nullopt;
  return v;
}

}  // namespace

std::vector<std::string> CsvColumns::feature_names() const {
  std::vector<std::string> out;
  for (size_t i = 0; i < names.size(); ++i)
    if (static_cast<int64_t>(i) != label_index) out.push_back(names[i]);
  return out;
}

bool csv_blank(std::string_view line) { return trim_blanks(line).empty(); }

std::string csv_columns(std::string_view first_line, const CsvOptions& o, CsvColumns& out) {
  if (first_line.find('"') != std::string_view::npos) return "quoted fields are not supported (numbers only)";
  std::vector<std::string_view> fields;
  split_line(first_line, o.delimiter, fields);
  out = {};
  for (size_t i = 0; i < fields.size(); ++i)
    out.names.push_back(o.header ? std::string(fields[i]) : std::to_string(i));
  for (size_t i = 0; i < out.names.size(); ++i)
    if (out.names[i] == o.label) out.label_index = static_cast<int64_t>(i);
  if (out.label_index < 0) return "no label column \"" + o.label + "\"";
  if (out.names.size() < 2) return "a table needs a label and at least one feature";
  return "";
}

std::string csv_parse_row(std::string_view line, const CsvColumns& columns, const CsvOptions& o, int64_t max_classes,
                          std::vector<float>& features, float& label) {
  if (line.find('"') != std::string_view::npos) return "quoted fields are not supported (numbers only)";
  thread_local std::vector<std::string_view> fields;
  split_line(line, o.delimiter, fields);
  if (fields.size() != columns.names.size())
    return detail::concat(fields.size(), " fields, the header has ", columns.names.size());
  const size_t first_feature = features.size();
  for (size_t i = 0; i < fields.size(); ++i) {
    const std::optional<double> v = finite_number(fields[i]);
    if (!v) {
      features.resize(first_feature);
      return "column \"" + columns.names[i] + "\" holds \"" + std::string(fields[i]) +
             "\", not a number (missing values are refused: fill or drop them first)";
    }
    if (std::fabs(*v) > std::numeric_limits<float>::max()) {  // it would be read as infinity
      features.resize(first_feature);
      return "column \"" + columns.names[i] + "\" holds " + std::string(fields[i]) + ", past float32's range";
    }
    if (static_cast<int64_t>(i) != columns.label_index) {
      features.push_back(static_cast<float>(*v));
      continue;
    }
    if (!o.regression) {
      const double limit = max_classes > 0 ? static_cast<double>(max_classes) : 1e6 + 1;
      if (*v < 0 || *v != std::floor(*v) || *v >= limit) {
        features.resize(first_feature);
        return max_classes > 0
                   ? detail::concat("label ", fields[i], " is not a class id (an integer in [0, ", max_classes, "))")
                   : detail::concat("label ", fields[i], " is not a class id (an integer in [0, 1e6])");
      }
    }
    label = static_cast<float>(*v);
  }
  return "";
}

}  // namespace tessera::data
