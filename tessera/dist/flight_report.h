// `tessera trace analyze DIR`: what the ranks' flight records (flight_recorder.h) say together. For
// each process group: the newest collective any rank reached, which ranks wait in it and for how long,
// and which never reached it (with the last collective each of those did, or that it wrote no record:
// dead, stopped, or its watchdog never saw a stuck call); and any sequence number the ranks filled
// with different calls (a desynchronised job: different ops, dtypes or sizes).
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace tessera::dist {

// Every rank-*.json of `dir` that is a flight record; ValueError naming the directory when none is.
std::vector<nlohmann::json> read_flight_records(const std::string& dir);

// An entry's call without its number: "allreduce (sum, float32 x 10)" (what the ranks must agree on
// for the same number, and what a plan of the job predicts: tessera plan).
std::string flight_call_of(const nlohmann::json& entry);

// The report, a line per finding; "" never (a group whose ranks all finished says so).
std::string analyze_flight_records(const std::vector<nlohmann::json>& records);

}  // namespace tessera::dist
