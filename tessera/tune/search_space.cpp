#include "tessera/tune/search_space.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include <toml++/toml.h>

#include "tessera/core/error.h"
#include "tessera/train/config.h"

namespace tessera::tune {

namespace {

std::string number_text(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%.6g", v);
  return text;
}

// A TOML value as the text --set parses back (a string quoted, so that "1e-3" stays a string); an
// array of them too, for list keys such as model.hidden (Ray Tune's choice([[32], [64, 64]])).
std::string value_text(const toml::node& node, const std::string& key, bool in_array = false) {
  if (auto v = node.value<int64_t>()) return std::to_string(*v);
  if (auto v = node.value<double>()) return number_text(*v);
  if (auto v = node.value<bool>()) return *v ? "true" : "false";
  if (auto v = node.value<std::string>()) return "\"" + *v + "\"";
  if (const toml::array* a = node.as_array(); a != nullptr && !in_array) {
    std::string text = "[";
    for (const auto& element : *a) text += (text.size() > 1 ? ", " : "") + value_text(element, key, true);
    return text + "]";
  }
  throw ValueError("[tune] " + key + ": values must be numbers, booleans, strings or arrays of them");
}

std::pair<double, double> range(const toml::node& node, const std::string& key, const char* kind) {
  const toml::array* a = node.as_array();
  if (!a || a->size() != 2 || !(*a)[0].value<double>() || !(*a)[1].value<double>())
    throw ValueError("[tune] " + key + ": " + kind + " needs [low, high]");
  const double low = *(*a)[0].value<double>(), high = *(*a)[1].value<double>();
  if (!(low < high)) throw ValueError("[tune] " + key + ": " + kind + " needs low < high, got [" + number_text(low) + ", " + number_text(high) + "]");
  return {low, high};
}

}  // namespace

std::vector<Dimension> parse_search_space(const std::string& text, const std::string& source) {
  toml::table root;
  try {
    root = toml::parse(text, source);
  } catch (const toml::parse_error& e) {
    throw ValueError("[tune] " + source + ": " + std::string(e.description()));
  }
  const std::vector<std::string> known = train::known_keys();
  std::vector<Dimension> space;
  for (const auto& [section, section_node] : root) {
    const toml::table* keys = section_node.as_table();
    if (!keys) throw ValueError("[tune] " + source + ": '" + std::string(section.str()) + "' must be a table [section.key]");
    for (const auto& [name, node] : *keys) {
      Dimension d;
      d.key = std::string(section.str()) + "." + std::string(name.str());
      if (std::find(known.begin(), known.end(), d.key) == known.end())
        throw ValueError("[tune] " + source + ": '" + d.key + "' is not a config key");
      const toml::table* spec = node.as_table();
      if (!spec) throw ValueError("[tune] " + d.key + ": expected a table such as log_uniform = [a, b]");
      int kinds = 0;
      if (auto* n = spec->get("log_uniform")) {
        std::tie(d.low, d.high) = range(*n, d.key, "log_uniform"), d.kind = Dimension::Kind::LogUniform, ++kinds;
        if (d.low <= 0) throw ValueError("[tune] " + d.key + ": log_uniform needs low > 0");
      }
      if (auto* n = spec->get("uniform")) std::tie(d.low, d.high) = range(*n, d.key, "uniform"), d.kind = Dimension::Kind::Uniform, ++kinds;
      if (auto* n = spec->get("int")) std::tie(d.low, d.high) = range(*n, d.key, "int"), d.kind = Dimension::Kind::Int, ++kinds;
      if (auto* n = spec->get("choice")) {
        const toml::array* a = n->as_array();
        if (!a || a->empty()) throw ValueError("[tune] " + d.key + ": choice needs a non-empty list");
        for (const auto& v : *a) d.values.push_back(value_text(v, d.key));
        d.kind = Dimension::Kind::Choice, ++kinds;
        d.grid = d.values;
      }
      if (kinds != 1)
        throw ValueError("[tune] " + d.key + ": give exactly one of log_uniform, uniform, int, choice");
      if (auto* n = spec->get("grid")) {
        const toml::array* a = n->as_array();
        if (!a || a->empty()) throw ValueError("[tune] " + d.key + ": grid needs a non-empty list");
        d.grid.clear();
        for (const auto& v : *a) d.grid.push_back(value_text(v, d.key));
      }
      space.push_back(d);
    }
  }
  if (space.empty()) throw ValueError("[tune] " + source + " names no key to search");
  return space;
}

std::vector<std::string> sample_trial(const std::vector<Dimension>& space, std::mt19937_64& rng) {
  std::vector<std::string> out;
  for (const Dimension& d : space) {
    std::string v;
    switch (d.kind) {
      case Dimension::Kind::LogUniform:
        v = number_text(std::exp(std::uniform_real_distribution<double>(std::log(d.low), std::log(d.high))(rng)));
        break;
      case Dimension::Kind::Uniform: v = number_text(std::uniform_real_distribution<double>(d.low, d.high)(rng)); break;
      case Dimension::Kind::Int:
        v = std::to_string(std::uniform_int_distribution<int64_t>(static_cast<int64_t>(std::ceil(d.low)),
                                                                   static_cast<int64_t>(std::floor(d.high)))(rng));
        break;
      case Dimension::Kind::Choice:
        v = d.values[std::uniform_int_distribution<size_t>(0, d.values.size() - 1)(rng)];
        break;
    }
    out.push_back(d.key + "=" + v);
  }
  return out;
}

std::vector<std::vector<std::string>> grid_trials(const std::vector<Dimension>& space) {
  std::vector<std::vector<std::string>> out{{}};
  for (const Dimension& d : space) {
    if (d.grid.empty()) throw ValueError("[tune] --grid: " + d.key + " has no grid = [...] values");
    std::vector<std::vector<std::string>> next;
    for (const auto& partial : out)
      for (const auto& v : d.grid) {
        next.push_back(partial);
        next.back().push_back(d.key + "=" + v);
      }
    out = std::move(next);
    if (out.size() > 100000) throw ValueError("[tune] --grid: more than 100000 combinations");
  }
  return out;
}

}  // namespace tessera::tune
