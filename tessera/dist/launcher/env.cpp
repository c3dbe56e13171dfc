#include "tessera/dist/launcher/env.h"

#include <charconv>
#include <cstdlib>
#include <initializer_list>

#include "tessera/core/error.h"

namespace tessera::dist::launcher {

namespace {

constexpr const char* kLauncherHint = " (set by `tessera run`; see tessera/dist/launcher/env.h)";

// `op` starts each message: "[worker_env]" or "[ps_role_env]".
const std::string& required(const std::map<std::string, std::string>& variables, const char* name,
                            const char* op = "[worker_env]") {
  auto it = variables.find(name);
  TESSERA_CHECK(it != variables.end(), op, " environment variable ", name, " is not set", kLauncherHint);
  return it->second;
}

// Whole-string integer in [lo, hi]; "3x", "" and " 3" are errors rather than silently 3 or 0.
int parse_int(const std::string& text, const char* name, int lo, int hi, const char* op = "[worker_env]") {
  int value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  TESSERA_CHECK(ec == std::errc() && end == text.data() + text.size() && !text.empty(),
                op, " ", name, "='", text, "' is not an integer", kLauncherHint);
  TESSERA_CHECK(value >= lo && value <= hi, op, " ", name, "=", value, " is out of range [", lo, ", ", hi, "]",
                kLauncherHint);
  return value;
}

int required_int(const std::map<std::string, std::string>& variables, const char* name, int lo, int hi,
                 const char* op = "[worker_env]") {
  return parse_int(required(variables, name, op), name, lo, hi, op);
}

constexpr int kMaxInt = 1 << 30;

// Every variable of both contracts (env.h).
constexpr const char* kContractVariables[] = {
    "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT",
    "TESSERA_JOB_TOKEN", "TESSERA_NUM_THREADS",
    "TESSERA_ROLE", "TESSERA_SERVER_RANK", "TESSERA_NUM_SERVERS", "TESSERA_NUM_WORKERS", "TESSERA_PROGRESS_FILE",
    "TESSERA_LAUNCHER_PID", "TESSERA_LIVE_JOINER"};

// The contract's variables that are set in this process's environment.
std::map<std::string, std::string> contract_environment() {
  std::map<std::string, std::string> variables;
  for (const char* name : kContractVariables)
    if (const char* value = std::getenv(name)) variables[name] = value;
  return variables;
}

}  // namespace

namespace {

// What workers and servers share: where the job's store is, its token, the node and the threads.
template <typename Env>
std::map<std::string, std::string> common_variables(const Env& env) {
  std::map<std::string, std::string> v{
      {"NODE_RANK", std::to_string(env.node_rank)},
      {"MASTER_ADDR", env.master_addr},
      {"MASTER_PORT", std::to_string(env.master_port)},
      {"TESSERA_JOB_TOKEN", env.job_token},
  };
  if (env.num_threads > 0) v["TESSERA_NUM_THREADS"] = std::to_string(env.num_threads);
  return v;
}

}  // namespace

std::map<std::string, std::string> to_variables(const WorkerEnv& env) {
  std::map<std::string, std::string> v = common_variables(env);
  v["RANK"] = std::to_string(env.rank);
  v["WORLD_SIZE"] = std::to_string(env.world_size);
  v["LOCAL_RANK"] = std::to_string(env.local_rank);
  v["LOCAL_WORLD_SIZE"] = std::to_string(env.local_world_size);
  return v;
}

WorkerEnv worker_env_from_variables(const std::map<std::string, std::string>& variables) {
  WorkerEnv env;
  env.world_size = required_int(variables, "WORLD_SIZE", 1, kMaxInt);
  env.rank = required_int(variables, "RANK", 0, env.world_size - 1);
  env.local_world_size = required_int(variables, "LOCAL_WORLD_SIZE", 1, env.world_size);
  env.local_rank = required_int(variables, "LOCAL_RANK", 0, env.local_world_size - 1);
  env.node_rank = required_int(variables, "NODE_RANK", 0, kMaxInt);
  env.master_addr = required(variables, "MASTER_ADDR");
  TESSERA_CHECK(!env.master_addr.empty(), "[worker_env] MASTER_ADDR is empty", kLauncherHint);
  env.master_port = required_int(variables, "MASTER_PORT", 1, 65535);
  env.job_token = required(variables, "TESSERA_JOB_TOKEN");
  TESSERA_CHECK(!env.job_token.empty(), "[worker_env] TESSERA_JOB_TOKEN is empty", kLauncherHint);
  if (auto it = variables.find("TESSERA_NUM_THREADS"); it != variables.end())
    env.num_threads = parse_int(it->second, "TESSERA_NUM_THREADS", 1, 1024);
  return env;
}

WorkerEnv worker_env_from_environment() { return worker_env_from_variables(contract_environment()); }

bool has_rank() { return std::getenv("RANK") != nullptr; }
bool has_worker_rank() { return has_rank() && std::getenv("WORLD_SIZE") != nullptr; }

std::optional<std::string> master_addr_from_environment() {
  const char* master = std::getenv("MASTER_ADDR");
  if (master == nullptr || *master == '\0') return std::nullopt;
  return std::string(master);
}

std::optional<int> master_port_from_environment() {
  const char* port = std::getenv("MASTER_PORT");
  if (port == nullptr || *port == '\0') return std::nullopt;
  char* end = nullptr;
  const long value = std::strtol(port, &end, 10);
  TESSERA_CHECK(end != port && *end == '\0' && value >= 1 && value <= 65535, "[env] MASTER_PORT='", port,
                "' is not a port (1-65535)");
  return static_cast<int>(value);
}

namespace {

// The first of `names` that is set, as an integer of at least `min` (launchers name the same number
// differently); nullopt where none is. ValueError naming the variable otherwise.
std::optional<int> first_integer_variable(std::initializer_list<const char*> names, long min, const char* what) {
  for (const char* name : names) {
    const char* text = std::getenv(name);
    if (text == nullptr || *text == '\0') continue;
    char* end = nullptr;
    const long value = std::strtol(text, &end, 10);
    TESSERA_CHECK(end != text && *end == '\0' && value >= min && value <= 1 << 20, "[env] ", name, "='", text,
                  "' is not ", what);
    return static_cast<int>(value);
  }
  return std::nullopt;
}

}  // namespace

std::optional<int> local_rank_from_environment() {
  return first_integer_variable({"LOCAL_RANK", "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID"}, 0,
                                "a local rank (a non-negative integer)");
}

std::optional<int> local_world_size_from_environment() {
  return first_integer_variable({"LOCAL_WORLD_SIZE", "SLURM_NTASKS_PER_NODE", "OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"},
                                1, "a number of workers on a node (a positive integer)");
}

std::map<std::string, std::string> to_variables(const ServerEnv& env) {
  std::map<std::string, std::string> v = common_variables(env);
  v["TESSERA_ROLE"] = "server";
  v["TESSERA_SERVER_RANK"] = std::to_string(env.server_rank);
  v["TESSERA_NUM_SERVERS"] = std::to_string(env.num_servers);
  v["TESSERA_NUM_WORKERS"] = std::to_string(env.num_workers);
  return v;
}

std::map<std::string, std::string> to_ps_worker_variables(const WorkerEnv& env, int num_servers) {
  std::map<std::string, std::string> v = to_variables(env);
  v["TESSERA_ROLE"] = "worker";
  v["TESSERA_NUM_SERVERS"] = std::to_string(num_servers);
  return v;
}

bool is_contract_variable(std::string_view name) {
  for (const char* known : kContractVariables)
    if (name == known) return true;
  return false;
}

PsRoleEnv ps_role_from_variables(const std::map<std::string, std::string>& variables) {
  constexpr const char* kOp = "[ps_role_env]";
  PsRoleEnv env;
  auto role = variables.find("TESSERA_ROLE");
  if (role == variables.end()) return env;
  TESSERA_CHECK(role->second == "server" || role->second == "worker", kOp, " TESSERA_ROLE='", role->second,
                "' is neither 'server' nor 'worker'", kLauncherHint);
  env.num_servers = required_int(variables, "TESSERA_NUM_SERVERS", 1, kMaxInt, kOp);
  if (role->second == "server") {
    env.role = PsRoleEnv::Role::kServer;
    env.server_rank = required_int(variables, "TESSERA_SERVER_RANK", 0, env.num_servers - 1, kOp);
    env.num_workers = required_int(variables, "TESSERA_NUM_WORKERS", 1, kMaxInt, kOp);
  } else {
    env.role = PsRoleEnv::Role::kWorker;
    env.num_workers = required_int(variables, "WORLD_SIZE", 1, kMaxInt, kOp);
  }
  return env;
}

PsRoleEnv ps_role_from_environment() { return ps_role_from_variables(contract_environment()); }

}  // namespace tessera::dist::launcher
