#include "tessera/dist/launcher/slurm_env.h"

#include <algorithm>
#include <charconv>
#include <cstdlib>

#include "tessera/core/error.h"

namespace tessera::dist::launcher {

namespace {

constexpr const char* kOp = "[slurm_env]";
constexpr size_t kMaxHosts = 65536;
// DNS names are at most 253 characters; with the host bound this caps an expanded list at 16 MiB.
// (Without it a 672-byte list of zero-padded ranges grew to 1.6 GB under fuzz_slurm_env.)
constexpr size_t kMaxHostNameLength = 255;
constexpr const char* kSlurmHint = " (srun sets it in every task; see tessera/dist/launcher/slurm_env.h)";

// Slurm's steps of its own (since 20.11: batch script 0xfffffffb, extern 0xfffffffc, interactive
// 0xfffffffa; before, the batch script was 0xfffffffe) are all at or above SLURM_MAX_NORMAL_STEP_ID.
constexpr long long kMaxNormalStepId = 0xfffffff0LL;

long long parse_number(std::string_view text, std::string_view variable, long long lo, long long hi) {
  long long value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  TESSERA_CHECK(!text.empty() && ec == std::errc() && end == text.data() + text.size(), kOp, " ", variable, "='",
                text, "' is not an integer", kSlurmHint);
  TESSERA_CHECK(value >= lo && value <= hi, kOp, " ", variable, "=", value, " is out of range [", lo, ", ", hi, "]",
                kSlurmHint);
  return value;
}

const std::string* find(const std::map<std::string, std::string>& variables, const char* name) {
  auto it = variables.find(name);
  return it == variables.end() ? nullptr : &it->second;
}

// The first of `names` that is set (a step's own variable before the job's).
const std::string* find_first(const std::map<std::string, std::string>& variables,
                              std::initializer_list<const char*> names, const char** which) {
  for (const char* name : names)
    if (const std::string* value = find(variables, name)) {
      *which = name;
      return value;
    }
  return nullptr;
}

const std::string& required_slurm_variable(const std::map<std::string, std::string>& variables, const char* name, int ntasks) {
  const std::string* value = find(variables, name);
  TESSERA_CHECK(value != nullptr, kOp, " this is a Slurm step of SLURM_NTASKS=", ntasks, " tasks, but ", name,
                " is not set", kSlurmHint, "; refusing to train as a world of one");
  return *value;
}

// Splits at the commas that are outside brackets.
std::vector<std::string_view> split_top_level(std::string_view list, std::string_view variable) {
  std::vector<std::string_view> items;
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0; i <= list.size(); ++i) {
    if (i == list.size() || (list[i] == ',' && depth == 0)) {
      items.push_back(list.substr(start, i - start));
      start = i + 1;
    } else if (list[i] == '[') {
      TESSERA_CHECK(depth == 0, kOp, " ", variable, "='", list, "': a '[' inside brackets");
      ++depth;
    } else if (list[i] == ']') {
      TESSERA_CHECK(depth == 1, kOp, " ", variable, "='", list, "': a ']' without its '['");
      --depth;
    }
  }
  TESSERA_CHECK(depth == 0, kOp, " ", variable, "='", list, "': a '[' without its ']'");
  return items;
}

bool all_digits(std::string_view text) {
  if (text.empty()) return false;
  for (char c : text)
    if (c < '0' || c > '9') return false;
  return true;
}

// The names one bracket group's ranges give ("01-03,07" -> 01 02 03 07), at most `budget` of them.
std::vector<std::string> expand_ranges(std::string_view ranges, std::string_view list, std::string_view variable,
                                       size_t budget) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= ranges.size()) {
    size_t comma = ranges.find(',', start);
    if (comma == std::string_view::npos) comma = ranges.size();
    std::string_view range = ranges.substr(start, comma - start);
    const size_t dash = range.find('-');
    std::string_view low = range.substr(0, dash), high = dash == std::string_view::npos ? low : range.substr(dash + 1);
    TESSERA_CHECK(all_digits(low) && all_digits(high), kOp, " ", variable, "='", list, "': '", range,
                  "' is not a number or a range of numbers (like 01-04)");
    const long long lo = parse_number(low, variable, 0, 999999999), hi = parse_number(high, variable, 0, 999999999);
    TESSERA_CHECK(lo <= hi, kOp, " ", variable, "='", list, "': the range '", range, "' runs backwards");
    TESSERA_CHECK(static_cast<size_t>(hi - lo) < budget - std::min(budget, out.size()), kOp, " ", variable, "='",
                  list, "' names more than ", kMaxHosts, " hosts");
    for (long long n = lo; n <= hi; ++n) {
      std::string digits = std::to_string(n);
      if (digits.size() < low.size()) digits.insert(0, low.size() - digits.size(), '0');
      out.push_back(std::move(digits));
    }
    start = comma + 1;
  }
  return out;
}

void check_host_name_length(size_t length, std::string_view list, std::string_view variable) {
  TESSERA_CHECK(length <= kMaxHostNameLength, kOp, " ", variable, "='", list.substr(0, 200),
                list.size() > 200 ? "...'" : "'", ": a host name of more than ", kMaxHostNameLength, " characters");
}

}  // namespace

std::vector<std::string> expand_host_list(std::string_view list, std::string_view variable) {
  std::vector<std::string> hosts;
  for (std::string_view item : split_top_level(list, variable)) {
    TESSERA_CHECK(!item.empty(), kOp, " ", variable, "='", list, "': an empty host name");
    // A name is text and bracket groups in turn; each group multiplies the names so far.
    std::vector<std::string> names{""};
    size_t i = 0;
    while (i < item.size()) {
      if (item[i] == '[') {
        const size_t close = item.find(']', i);  // split_top_level checked that it exists
        std::string_view ranges = item.substr(i + 1, close - i - 1);
        TESSERA_CHECK(!ranges.empty(), kOp, " ", variable, "='", list, "': empty brackets");
        // Every name so far times every part, beside the hosts already listed, within the bound.
        const size_t budget = (kMaxHosts - hosts.size()) / names.size();
        std::vector<std::string> parts = expand_ranges(ranges, list, variable, budget);
        std::vector<std::string> product;
        for (const std::string& name : names)
          for (const std::string& part : parts) {
            check_host_name_length(name.size() + part.size(), list, variable);
            product.push_back(name + part);
          }
        names = std::move(product);
        i = close + 1;
      } else {
        const size_t next = item.find('[', i);
        std::string_view text = item.substr(i, next == std::string_view::npos ? std::string_view::npos : next - i);
        for (std::string& name : names) {
          check_host_name_length(name.size() + text.size(), list, variable);
          name += text;
        }
        i += text.size();
      }
    }
    hosts.insert(hosts.end(), names.begin(), names.end());
    TESSERA_CHECK(hosts.size() <= kMaxHosts, kOp, " ", variable, "='", list, "' names more than ", kMaxHosts, " hosts");
  }
  return hosts;
}

std::vector<int> expand_tasks_per_node(std::string_view list, std::string_view variable) {
  std::vector<int> tasks;
  for (std::string_view item : split_top_level(list, variable)) {
    // "N" or "N(xK)".
    const size_t paren = item.find('(');
    std::string_view count = item.substr(0, paren);
    long long repeat = 1;
    if (paren != std::string_view::npos) {
      TESSERA_CHECK(item.size() > paren + 3 && item.substr(paren, 2) == "(x" && item.back() == ')', kOp, " ", variable,
                    "='", list, "': '", item, "' is not N or N(xK)");
      repeat = parse_number(item.substr(paren + 2, item.size() - paren - 3), variable, 1, kMaxHosts);
    }
    const int n = static_cast<int>(parse_number(count, variable, 1, 1 << 20));
    TESSERA_CHECK(tasks.size() + static_cast<size_t>(repeat) <= kMaxHosts, kOp, " ", variable, "='", list,
                  "' names more than ", kMaxHosts, " nodes");
    tasks.insert(tasks.end(), static_cast<size_t>(repeat), n);
  }
  return tasks;
}

int slurm_port(long long job_id, long long step_id) {
  // Consecutive jobs get consecutive ports; a job's steps are 997 apart (a prime, so a job's first
  // steps do not land on the next jobs' ports).
  const long long mixed = (job_id + step_id * 997) % 10000;
  return 20000 + static_cast<int>(mixed < 0 ? mixed + 10000 : mixed);
}

std::optional<SlurmStep> slurm_step_from_variables(const std::map<std::string, std::string>& variables) {
  // A step's own counts (SLURM_STEP_NUM_*) before the job's: `srun -N 2` inside a larger allocation.
  const std::string* job = find(variables, "SLURM_JOB_ID");
  const char* ntasks_name = nullptr;
  const std::string* ntasks_text = find_first(variables, {"SLURM_STEP_NUM_TASKS", "SLURM_NTASKS"}, &ntasks_name);
  if (job == nullptr || ntasks_text == nullptr) return std::nullopt;
  SlurmStep step;
  step.ntasks = static_cast<int>(parse_number(*ntasks_text, ntasks_name, 1, 1 << 20));
  if (step.ntasks == 1) return std::nullopt;
  step.job_id = parse_number(*job, "SLURM_JOB_ID", 0, (1LL << 53));
  // The batch script (or salloc's shell) is no step of tasks: what runs there is one process (or a
  // launcher of its own, `tessera run --nproc-per-node N`); slurm_batch_script() tells it apart.
  const std::string* step_text = find(variables, "SLURM_STEP_ID");
  if (step_text == nullptr) return std::nullopt;
  step.step_id = parse_number(*step_text, "SLURM_STEP_ID", 0, 1LL << 40);
  if (step.step_id >= kMaxNormalStepId) return std::nullopt;
  step.rank = static_cast<int>(parse_number(required_slurm_variable(variables, "SLURM_PROCID", step.ntasks), "SLURM_PROCID", 0,
                                            step.ntasks - 1));
  const char* nnodes_name = "SLURM_NNODES";
  const std::string* nnodes_text = find_first(variables, {"SLURM_STEP_NUM_NODES", "SLURM_NNODES"}, &nnodes_name);
  if (nnodes_text == nullptr) nnodes_text = &required_slurm_variable(variables, "SLURM_NNODES", step.ntasks);
  step.nnodes = static_cast<int>(parse_number(*nnodes_text, nnodes_name, 1, step.ntasks));
  step.node_id = static_cast<int>(
      parse_number(required_slurm_variable(variables, "SLURM_NODEID", step.ntasks), "SLURM_NODEID", 0, step.nnodes - 1));
  const char* list_name = nullptr;
  const std::string* list = find_first(variables, {"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST"}, &list_name);
  TESSERA_CHECK(list != nullptr, kOp, " this is a Slurm step of SLURM_NTASKS=", step.ntasks,
                " tasks, but neither SLURM_STEP_NODELIST nor SLURM_JOB_NODELIST is set", kSlurmHint,
                "; refusing to train as a world of one");
  step.nodes = expand_host_list(*list, list_name);
  TESSERA_CHECK(static_cast<int>(step.nodes.size()) == step.nnodes, kOp, " ", list_name, "='", *list, "' names ",
                step.nodes.size(), " nodes but ", nnodes_name, "=", step.nnodes);
  const char* tasks_name = nullptr;
  const std::string* tasks_text =
      find_first(variables, {"SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"}, &tasks_name);
  TESSERA_CHECK(tasks_text != nullptr, kOp, " this is a Slurm step of SLURM_NTASKS=", step.ntasks,
                " tasks, but neither SLURM_STEP_TASKS_PER_NODE nor SLURM_TASKS_PER_NODE is set", kSlurmHint,
                "; refusing to train as a world of one");
  std::vector<int> per_node = expand_tasks_per_node(*tasks_text, tasks_name);
  long long total = 0;
  for (int n : per_node) total += n;
  TESSERA_CHECK(static_cast<int>(per_node.size()) == step.nnodes && total == step.ntasks, kOp, " ", tasks_name, "='",
                *tasks_text, "' gives ", total, " tasks on ", per_node.size(), " nodes, but ", ntasks_name, "=",
                step.ntasks, " and ", nnodes_name, "=", step.nnodes);
  step.local_tasks = per_node[static_cast<size_t>(step.node_id)];
  step.local_rank = static_cast<int>(
      parse_number(required_slurm_variable(variables, "SLURM_LOCALID", step.ntasks), "SLURM_LOCALID", 0, step.local_tasks - 1));
  return step;
}

namespace {

std::string master_addr_of(const SlurmStep& step, const std::map<std::string, std::string>& variables) {
  if (const std::string* addr = find(variables, "MASTER_ADDR"); addr != nullptr && !addr->empty()) return *addr;
  return step.nodes.front();
}

int master_port_of(const SlurmStep& step, const std::map<std::string, std::string>& variables) {
  if (const std::string* port = find(variables, "MASTER_PORT"); port != nullptr && !port->empty())
    return static_cast<int>(parse_number(*port, "MASTER_PORT", 1, 65535));
  return slurm_port(step.job_id, step.step_id);
}

}  // namespace

WorkerEnv worker_env_from_slurm(const SlurmStep& step, const std::map<std::string, std::string>& variables) {
  WorkerEnv env;
  env.rank = step.rank;
  env.world_size = step.ntasks;
  env.local_rank = step.local_rank;
  env.local_world_size = step.local_tasks;
  env.node_rank = step.node_id;
  env.master_addr = master_addr_of(step, variables);
  env.master_port = master_port_of(step, variables);
  const std::string* token = find(variables, "TESSERA_JOB_TOKEN");
  TESSERA_CHECK(token != nullptr && !token->empty(), kOp, " Slurm job ", step.job_id, " step ", step.step_id,
                ": TESSERA_JOB_TOKEN is not set; every task must present the same secret to rank 0's store. "
                "Export one before srun, which passes it to every task: export TESSERA_JOB_TOKEN=$(od -An -tx1 "
                "-N16 /dev/urandom | tr -d ' \\n')");
  env.job_token = *token;
  if (const std::string* threads = find(variables, "TESSERA_NUM_THREADS"); threads != nullptr && !threads->empty())
    env.num_threads = static_cast<int>(parse_number(*threads, "TESSERA_NUM_THREADS", 1, 1024));
  return env;
}

SlurmLauncherPlace launcher_place_from_slurm(const SlurmStep& step,
                                             const std::map<std::string, std::string>& variables) {
  TESSERA_CHECK(step.ntasks == step.nnodes, "[run] under srun, tessera run is one launcher per node, but this step "
                "has SLURM_NTASKS=", step.ntasks, " tasks on SLURM_NNODES=", step.nnodes,
                " nodes: start it with `srun --ntasks-per-node=1 tessera run --nproc-per-node N -- ...`, or start "
                "the program itself with srun (one task per process)");
  SlurmLauncherPlace place;
  place.nnodes = step.nnodes;
  place.node_rank = step.node_id;
  place.master_addr = master_addr_of(step, variables);
  place.master_port = master_port_of(step, variables);
  return place;
}

std::map<std::string, std::string> slurm_environment() {
  std::map<std::string, std::string> variables;
  for (const char* name : {"SLURM_JOB_ID", "SLURM_STEP_ID", "SLURM_NTASKS", "SLURM_STEP_NUM_TASKS", "SLURM_NNODES",
                           "SLURM_STEP_NUM_NODES", "SLURM_PROCID", "SLURM_LOCALID",
                           "SLURM_NODEID", "SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST",
                           "SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE", "SLURM_CPUS_PER_TASK", "MASTER_ADDR", "MASTER_PORT",
                           "TESSERA_JOB_TOKEN", "TESSERA_NUM_THREADS"})
    if (const char* value = std::getenv(name)) variables[name] = value;
  return variables;
}

std::optional<SlurmStep> slurm_step_from_environment() { return slurm_step_from_variables(slurm_environment()); }

int slurm_batch_script_tasks(const std::map<std::string, std::string>& variables) {
  if (find(variables, "SLURM_JOB_ID") == nullptr || slurm_step_from_variables(variables)) return 0;
  const std::string* step = find(variables, "SLURM_STEP_ID");
  if (step != nullptr && parse_number(*step, "SLURM_STEP_ID", 0, 1LL << 40) < kMaxNormalStepId) return 0;
  const std::string* ntasks = find(variables, "SLURM_NTASKS");
  return ntasks == nullptr ? 0 : static_cast<int>(parse_number(*ntasks, "SLURM_NTASKS", 1, 1 << 20));
}

}  // namespace tessera::dist::launcher
