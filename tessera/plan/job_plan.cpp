#include "tessera/plan/job_plan.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>

#include "tessera/core/error.h"
#include "tessera/dist/flight_report.h"

namespace tessera::plan {

namespace {

using nlohmann::json;
using tessera::detail::concat;

std::string mib(int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", static_cast<double>(bytes) / (1024.0 * 1024.0));
  return buf;
}

// "0-3", "0, 2", "5"; consecutive runs joined.
std::string rank_list(const std::vector<int>& ranks) {
  std::string out;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (!out.empty()) out += ", ";
    out += j == i ? std::to_string(ranks[i]) : concat(ranks[i], "-", ranks[j]);
    i = j + 1;
  }
  return out;
}

// (group name, global rank) -> record, for one set of records.
std::map<std::pair<std::string, int>, const json*> by_group_and_rank(const std::vector<const json*>& records) {
  std::map<std::pair<std::string, int>, const json*> out;
  for (const json* r : records) out[{r->value("group", ""), r->value("global_rank", -1)}] = r;
  return out;
}

std::vector<const json*> plan_records(const JobPlan& plan) {
  std::vector<const json*> out;
  for (const RankPlan& r : plan.ranks)
    for (const json& record : r.flight_records) out.push_back(&record);
  return out;
}

std::map<uint64_t, const json*> entries_by_number(const json& record) {
  std::map<uint64_t, const json*> out;
  for (const json& e : record["entries"]) out[e.value("sequence", uint64_t{0})] = &e;
  return out;
}

// The entries of `rank` in `phase`, each as "call  [group of n: ranks]  at site", counted in order of
// first appearance.
std::vector<std::pair<std::string, int>> phase_calls(const RankPlan& rank, const std::string& phase) {
  std::vector<std::pair<std::string, int>> calls;
  std::map<std::string, size_t> index;
  for (const json& record : rank.flight_records)
    for (const json& e : record["entries"]) {
      if (e.value("phase", "") != phase) continue;
      const std::vector<int> members = record.value("global_ranks", std::vector<int>{});
      std::string site = e.value("call_site", "");
      const std::string line = concat(dist::flight_call_of(e), " over ranks ", rank_list(members),
                                      site.empty() ? "" : " at " + site);
      auto [it, added] = index.emplace(line, calls.size());
      if (added) calls.emplace_back(line, 0);
      ++calls[it->second].second;
    }
  return calls;
}

// The same calls with the group's ranks left out, so that ranks in the same role (each replica's
// stage 0) share one list.
std::string role_of(const RankPlan& rank, const std::string& phase) {
  std::string role;
  for (const json& record : rank.flight_records)
    for (const json& e : record["entries"])
      if (e.value("phase", "") == phase)
        role += concat(dist::flight_call_of(e), "/", record.value("size", 0), "/", e.value("call_site", ""), "\n");
  return role;
}

// `rows[i]` is rank i's row: each run of consecutive ranks with equal rows becomes one printed line,
// named "rank 3" or "ranks 4-7" (left-aligned in `name_width`), through `print(name, row)`.
template <typename Row, typename Print>
std::string runs_of_equal_rows(const std::vector<Row>& rows, int name_width, Print print) {
  std::string out;
  for (size_t i = 0; i < rows.size();) {
    size_t j = i;
    while (j + 1 < rows.size() && rows[j + 1] == rows[i]) ++j;
    std::vector<int> who;
    for (size_t k = i; k <= j; ++k) who.push_back(static_cast<int>(k));
    char name[64];
    std::snprintf(name, sizeof name, "%-*s", name_width, ((who.size() == 1 ? "rank " : "ranks ") + rank_list(who)).c_str());
    out += print(std::string(name), rows[i]);
    i = j + 1;
  }
  return out;
}

std::vector<std::string> memory_row(const MemoryPlan& m) {
  return {mib(m.parameters), mib(m.gradients), mib(m.optimizer_state), mib(m.activations),
          mib(m.communication_buffers), mib(m.other), mib(m.peak)};
}

json memory_json(const MemoryPlan& m) {
  return {{"parameters", m.parameters},       {"gradients", m.gradients},
          {"optimizer_state", m.optimizer_state}, {"activations", m.activations},
          {"communication_buffers", m.communication_buffers}, {"other", m.other},
          {"peak", m.peak}};
}

}  // namespace

std::string JobPlan::reported_step() const { return concat("step ", options.steps); }

JobPlan make_plan(const train::TrainConfig& config, const PlanOptions& options, const std::string& config_source,
                  const std::function<void(int)>& on_rank) {
  JobPlan plan;
  plan.config_source = config_source;
  plan.options = options;
  auto mailbox = std::make_shared<dist::DryMailbox>();
  if (needs_message_exchange(config)) {
    if (on_rank) on_rank(-1);
    exchange_messages(config, options, mailbox);
    mailbox->seal();
    mailbox->rewind();
  }
  for (int r = 0; r < options.world; ++r) {
    if (on_rank) on_rank(r);
    plan.ranks.push_back(dry_run_rank(config, options, r, mailbox));
  }
  return plan;
}

std::string sequence_disagreement(const JobPlan& plan) {
  // group -> number -> call -> the ranks (and call sites) that made it
  std::map<std::string, std::map<uint64_t, std::map<std::string, std::vector<std::string>>>> calls;
  for (const json* record : plan_records(plan))
    for (const json& e : (*record)["entries"])
      calls[record->value("group", "")][e.value("sequence", uint64_t{0})][dist::flight_call_of(e)].push_back(
          concat("rank ", record->value("global_rank", -1), " at ", e.value("call_site", "")));
  for (const auto& [group, numbers] : calls)
    for (const auto& [number, variants] : numbers) {
      if (variants.size() < 2) continue;
      std::string out = concat("group ", group, " collective #", number, " is not the same call on every rank:\n");
      for (const auto& [call, who] : variants) {
        std::string list;
        for (const std::string& w : who) list += (list.empty() ? "" : "; ") + w;
        out += concat("  ", call, ": ", list, "\n");
      }
      return out;
    }
  // A rank that issued more collectives than its group's others (the real job would hang in it).
  std::map<std::string, std::map<uint64_t, std::vector<int>>> counts;  // group -> issued -> ranks
  for (const json* record : plan_records(plan))
    counts[record->value("group", "")][record->value("next_sequence", uint64_t{0})].push_back(
        record->value("global_rank", -1));
  for (const auto& [group, by_count] : counts) {
    if (by_count.size() < 2) continue;
    std::string out = concat("group ", group, ": its ranks issued different numbers of collectives:\n");
    for (const auto& [issued, ranks] : by_count) out += concat("  ", issued, " by rank(s) ", rank_list(ranks), "\n");
    return out;
  }
  return "";
}

std::string compare_with_flight_records(const JobPlan& plan, const std::vector<json>& records, int64_t& compared) {
  compared = 0;
  const auto planned = by_group_and_rank(plan_records(plan));
  std::string differences;
  int matched_records = 0;
  for (const json& real : records) {
    auto it = planned.find({real.value("group", ""), real.value("global_rank", -1)});
    if (it == planned.end()) continue;
    ++matched_records;
    const auto expected = entries_by_number(*it->second);
    for (const json& e : real["entries"]) {
      const uint64_t number = e.value("sequence", uint64_t{0});
      auto want = expected.find(number);
      if (want == expected.end()) continue;
      ++compared;
      const std::string got = dist::flight_call_of(e), planned_call = dist::flight_call_of(*want->second);
      if (got != planned_call)
        differences += concat("rank ", real.value("global_rank", -1), " group ", real.value("group", ""), " #", number,
                              ": the run called ", got, " at ", e.value("call_site", ""), ", the plan ", planned_call,
                              " at ", want->second->value("call_site", ""), "\n");
    }
  }
  TESSERA_CHECK(matched_records > 0, "[plan] none of the ", records.size(), " flight records is of a rank and "
                "process group of this plan (was the run made with the same config and world size?)");
  return differences;
}

LinkBytes phase_bytes(const JobPlan& plan, const RankPlan& rank, const std::string& phase) {
  LinkBytes total;
  for (const dist::DryCall& call : rank.calls)
    if (call.phase == phase) total += bytes_sent(call, rank.rank, plan.layout());
  return total;
}

std::string plan_text(const JobPlan& plan) {
  const PlanOptions& o = plan.options;
  const std::string step = plan.reported_step();
  std::string out = concat("tessera plan: ", plan.config_source, " at ", o.world, o.world == 1 ? " rank" : " ranks");
  if (o.hosts > 1) out += concat(" on ", o.hosts, " hosts (", o.world / o.hosts, " per host)");
  out += concat("\nstrategy: ", plan.ranks.empty() ? "" : plan.ranks[0].strategy, "\n\n");

  // Memory: one row per run of ranks holding the same bytes.
  out += "memory per rank (MiB)  parameters  gradients  optimizer  activations  comm-buffers     other      peak\n";
  std::vector<std::vector<std::string>> memory_rows;
  for (const RankPlan& r : plan.ranks) memory_rows.push_back(memory_row(r.memory));
  out += runs_of_equal_rows(memory_rows, 20, [](const std::string& name, const std::vector<std::string>& row) {
    char line[256];
    std::snprintf(line, sizeof line, "  %s %11s %10s %10s %12s %13s %9s %9s\n", name.c_str(), row[0].c_str(),
                  row[1].c_str(), row[2].c_str(), row[3].c_str(), row[4].c_str(), row[5].c_str(), row[6].c_str());
    return std::string(line);
  });

  // Collectives of the reported step, once per role.
  out += concat("\ncollectives per step (", step, "; point-to-point not listed)\n");
  std::map<std::string, std::vector<int>> roles;
  std::vector<std::string> role_order;
  for (const RankPlan& r : plan.ranks) {
    const std::string role = role_of(r, step);
    if (!roles.count(role)) role_order.push_back(role);
    roles[role].push_back(r.rank);
  }
  for (const std::string& role : role_order) {
    const std::vector<int>& who = roles[role];
    out += concat("  ", who.size() == 1 ? "rank " : "ranks ", rank_list(who), who.size() > 1 ? " (rank " + std::to_string(who[0]) + "'s groups shown)" : "", ":\n");
    const auto calls = phase_calls(plan.ranks[static_cast<size_t>(who[0])], step);
    if (calls.empty()) out += "    none\n";
    for (const auto& [line, count] : calls) out += concat("    ", count, " x ", line, "\n");
  }

  // Bytes on the links in the reported step, and the setup's.
  out += concat("\nbytes sent per rank (MiB)   ", step, ": within a host  between hosts    setup: within  between\n");
  std::vector<std::vector<int64_t>> byte_rows;  // step within, step between, setup within, setup between
  std::vector<int64_t> host_out(static_cast<size_t>(o.hosts), 0);
  for (const RankPlan& r : plan.ranks) {
    const LinkBytes s = phase_bytes(plan, r, step), u = phase_bytes(plan, r, "setup");
    byte_rows.push_back({s.within_host, s.between_hosts, u.within_host, u.between_hosts});
    host_out[static_cast<size_t>(plan.layout().host_of(r.rank))] += s.between_hosts;
  }
  out += runs_of_equal_rows(byte_rows, 26, [](const std::string& name, const std::vector<int64_t>& row) {
    char line[256];
    std::snprintf(line, sizeof line, "  %s %15s %14s %14s %8s\n", name.c_str(), mib(row[0]).c_str(),
                  mib(row[1]).c_str(), mib(row[2]).c_str(), mib(row[3]).c_str());
    return std::string(line);
  });
  if (o.hosts > 1) {
    const int64_t busiest = *std::max_element(host_out.begin(), host_out.end());
    out += concat("  the busiest host sends ", mib(busiest), " MiB per step to the others");
    if (plan.link_gbit > 0)
      out += concat(": at least ", busiest * 8.0 / (plan.link_gbit * 1e9) * 1e3, " ms per step on a ", plan.link_gbit,
                    " Gbit/s link");
    out += "\n";
  }

  // Compute here, and the proof of agreement.
  double slowest = 0;
  for (const RankPlan& r : plan.ranks) slowest = std::max(slowest, r.step_seconds.empty() ? 0.0 : r.step_seconds.back());
  out += concat("\ncompute: the slowest rank's ", step, " took ", slowest * 1e3, " ms on this machine (one rank at a time)\n");
  const std::string disagreement = sequence_disagreement(plan);
  if (disagreement.empty())
    out += concat("every rank of every process group issues the same collectives in the same order (setup and ",
                  o.steps, o.steps == 1 ? " step" : " steps", ", ", plan.ranks.size(), " ranks checked)\n");
  else
    out += "THE RANKS DISAGREE: " + disagreement;
  return out;
}

json plan_json(const JobPlan& plan) {
  const std::vector<std::string> phases = phase_names(plan.options);
  json ranks = json::array();
  for (const RankPlan& r : plan.ranks) {
    json by_phase = json::object();
    for (const std::string& phase : phases) {
      json collectives = json::array();
      for (const json& record : r.flight_records)
        for (const json& e : record["entries"])
          if (e.value("phase", "") == phase)
            collectives.push_back({{"group", record.value("group", "")},
                                   {"global_ranks", record.value("global_ranks", std::vector<int>{})},
                                   {"sequence", e.value("sequence", uint64_t{0})},
                                   {"call", dist::flight_call_of(e)},
                                   {"call_site", e.value("call_site", "")}});
      int64_t sends = 0, send_bytes = 0;
      for (const dist::DryCall& call : r.calls)
        if (call.phase == phase && call.op == "send") {
          ++sends;
          send_bytes += call.bytes();
        }
      const LinkBytes bytes = phase_bytes(plan, r, phase);
      by_phase[phase] = {{"collectives", collectives},
                         {"sends", sends},
                         {"send_bytes", send_bytes},
                         {"bytes_within_host", bytes.within_host},
                         {"bytes_between_hosts", bytes.between_hosts}};
    }
    ranks.push_back({{"rank", r.rank},
                     {"host", plan.layout().host_of(r.rank)},
                     {"memory", memory_json(r.memory)},
                     {"step_seconds", r.step_seconds},
                     {"phases", by_phase}});
  }
  return {{"format", "tessera plan 1"},
          {"config", plan.config_source},
          {"world", plan.options.world},
          {"hosts", plan.options.hosts},
          {"steps", plan.options.steps},
          {"link_gbit", plan.link_gbit},
          {"strategy", plan.ranks.empty() ? "" : plan.ranks[0].strategy},
          {"sequences_agree", sequence_disagreement(plan).empty()},
          {"ranks", ranks}};
}

}  // namespace tessera::plan
