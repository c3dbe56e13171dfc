#include "tessera/util/settings.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include "tessera/core/error.h"

namespace tessera {

namespace {

constexpr std::string_view kUser = "user";
constexpr std::string_view kPsLauncher = "tessera run --servers/--workers (parameter-server job)";
constexpr std::string_view kElasticAgent = "tessera run --nnodes MIN:MAX (elastic agent)";
constexpr std::string_view kLauncher = "tessera run (every launcher)";
constexpr SettingType kInteger = SettingType::kInteger;
constexpr SettingType kFlag = SettingType::kFlag;
constexpr int64_t kTerabyte = int64_t{1} << 40;

constexpr std::array kSettings{
    Setting{"TESSERA_NUM_THREADS", "all cores; under tessera run: cores / local workers",
            "intra-op threads of a process (also bounds OpenBLAS and oneDNN); --threads overrides it", kUser, kInteger, 1, 1024},
    Setting{"TESSERA_JOB_TOKEN", "128 random bits per job, made by tessera run",
            "secret every store and parameter-server client presents; the nodes of a multi-node job must share one",
            kUser},
    Setting{"TESSERA_SERVE_TOKEN", "unset (no token on loopback; required with a non-loopback --host)",
            "bearer token every tessera serve route but /healthz requires; --token overrides it (a router gives its "
            "replicas a random one)",
            kUser},
    Setting{"TESSERA_CPU_CACHE_MB", "2048", "MiB of freed CPU tensor memory the allocator keeps for reuse", kUser, kInteger, 0, int64_t{1} << 30},
    Setting{"TESSERA_MEMORY_BUDGET", "unset (no budget)",
            "most bytes live CPU tensors may hold (e.g. 512M, 8G; K/M/G are powers of 1024); an allocation past "
            "it raises OutOfMemoryError",
            kUser},
    Setting{"TESSERA_CONV", "onednn", "convolution kernels: onednn, or im2col (im2col + the float32 GEMM TESSERA_GEMM picks)", kUser},
    Setting{"TESSERA_GEMM", "onednn", "float32 matrix products (matmul, linear, im2col convolution): onednn, or openblas",
            kUser},
    Setting{"TESSERA_CUDA_MEMORY_FRACTION", "unset: the whole device",
            "the share of each GPU's memory (a number in (0, 1]) the CUDA allocator may reserve", kUser},
    Setting{"TESSERA_DEBUG_KILL_IN_SAVE", "-1 (off)",
            "fault injection: the process kills itself (SIGKILL) while writing this step's checkpoint, after its "
            "model file (what kill -9 in the middle of a save leaves)",
            kUser, kInteger, -1, int64_t{1} << 62},
    Setting{"TESSERA_DEBUG_WEDGE", "unset (off)",
            "fault injection for the wedge watch's tests: step:R:S blocks rank R before its step S, loader:R:B blocks "
            "rank R's data loader before batch B of an epoch",
            kUser},
    Setting{"TESSERA_WEDGE_FACTOR", "3",
            "a launcher reports a wedged job (every worker's stacks and flight records) when no rank finished a "
            "training step for this many median steps (0: never)",
            kUser, kInteger, 0, 1000000},
    Setting{"TESSERA_WEDGE_MIN_MS", "2000",
            "but never before this many milliseconds without a step (jobs of millisecond steps)", kUser, kInteger, 1,
            int64_t{86400000}},
    Setting{"TESSERA_FLIGHT_DIR", "unset; tessera train uses <output_dir>/flight",
            "directory where each rank's process groups write their flight record (the last collectives) when one "
            "is stuck, fails, or on SIGUSR2; tessera trace analyze DIR reads them",
            kUser},
    Setting{"TESSERA_FLIGHT_AT_END", "0",
            "1: tessera train also writes every process group's flight record when training ends (what tessera plan "
            "--compare-flight checks a plan against)",
            kUser, kFlag},
    Setting{"TESSERA_COLLECTIVE_CHECK", "1",
            "0 turns off the always-on check that every rank called the same collectives (fingerprints compared "
            "about once a second through the store)",
            kUser, kFlag},
    Setting{"TESSERA_DIST_DEBUG", "0",
            "1: every collective's op, dtype and shape are compared across ranks before it runs", kUser, kFlag},
    Setting{"TESSERA_SOCKET_IFNAME", "the interface that routes to MASTER_ADDR",
            "network interface whose IPv4 address this process advertises to the other hosts (gloo, pipeline p2p)",
            kUser},
    Setting{"TESSERA_PYTHON", "python3 on the PATH",
            "the Python, with Ray, that `tessera train --launcher ray` and `tessera tune --backend ray` run their "
            "driver (tessera.ray) with",
            kUser},
    Setting{"TESSERA_GLOO_HOST", "127.0.0.1 on one machine, else the address TESSERA_SOCKET_IFNAME picks",
            "address (or host name) the other ranks connect to for this rank's gloo connections", kUser},
    Setting{"TESSERA_SHM_SPIN", "4000 when ranks <= cores, else 64",
            "the most pauses (about 11.5 ns each) a shared-memory rank spins before it sleeps on a futex; within it "
            "the budget adapts to the peers' arrival gaps (0: sleep at once)",
            kUser, kInteger, 0, 100000000},
    Setting{"TESSERA_COMM_PRIORITY", "10",
            "nice levels each process group's collectives thread runs above the rest of its process (0: the same); "
            "raising it needs CAP_SYS_NICE or an RLIMIT_NICE that allows it (ulimit -e), else the thread runs at the "
            "process's priority",
            kUser, kInteger, 0, 39},
    Setting{"TESSERA_BIND_CORES", "1",
            "0 leaves a launcher's local processes unbound; else each gets its own cores (threads per process of "
            "them) when together they fill the launcher's affinity mask exactly (the default thread count, cores / "
            "processes, does)",
            kUser, kFlag},
    Setting{"TESSERA_SHM_P2P", "1",
            "0 sends point-to-point (pipeline messages) of backend auto on one machine over gloo instead of shared "
            "memory",
            kUser, kFlag},
    Setting{"TESSERA_SHM_RING_BYTES", "8 MiB / (ranks x (ranks - 1)), between 64 KiB and 1 MiB",
            "bytes of each shared-memory point-to-point ring (one per ordered pair of ranks)", kUser, kInteger, 4096, kTerabyte},
    Setting{"TESSERA_TCP_SPIN_US", "100",
            "microseconds a tcp collective retries its sockets (yielding the core) after the last byte moved "
            "before it sleeps in poll (0: sleep at once)",
            kUser, kInteger, 0, 100000},
    Setting{"TESSERA_TCP_ALGORITHM", "auto",
            "reduce-scatter, all-gather and all-reduce (above 64 KiB) of the tcp backend over 4, 8, 16... ranks: auto "
            "(by size), ring or halving-doubling; the same on every rank",
            kUser},
    Setting{"TESSERA_PS_SHM", "1",
            "0 sends a parameter-server worker's dense values over TCP even to servers on its own machine (else "
            "they go through shared memory)",
            kUser, kFlag},
    Setting{"TESSERA_MPI_EXIT_TIMEOUT_S", "300",
            "seconds an MPI process may spend in MPI_Finalize or MPI_Abort at exit before it leaves by itself "
            "(exit code 1)",
            kUser, kInteger, 1, 86400},
    Setting{"TESSERA_SLURM_EXIT_WAIT_S", "30",
            "seconds rank 0 of a job started by srun keeps the rendezvous store up at exit for the other tasks to "
            "finish with it",
            kUser, kInteger, 0, 3600},
    Setting{"TESSERA_SHM_CHUNK_BYTES", "the shm backend's default chunk",
            "bytes per pipelined chunk of a shared-memory collective", kUser, kInteger, 1, kTerabyte},
    Setting{"TESSERA_ROLE", "unset (not a parameter-server job)", "worker or server", kPsLauncher},
    Setting{"TESSERA_NUM_SERVERS", "unset", "parameter servers in the job", kPsLauncher, kInteger, 1, 65536},
    Setting{"TESSERA_SERVER_RANK", "unset", "this server's index among the servers", kPsLauncher, kInteger, 0, 65535},
    Setting{"TESSERA_NUM_WORKERS", "unset", "workers in a parameter-server job (set for its servers)", kPsLauncher, kInteger, 1, 65536},
    Setting{"TESSERA_ELASTIC_GENERATION", "unset (not an elastic job)",
            "the membership generation this worker belongs to; turns on the elastic report and survivor save",
            kElasticAgent, kInteger, 0, int64_t{1} << 62},
    Setting{"TESSERA_RESTART_COUNT", "unset", "restarts of the elastic job so far", kElasticAgent, kInteger, 0, int64_t{1} << 62},
    Setting{"TESSERA_ELASTIC_MAX_WORLD", "unset",
            "the largest world size the elastic job may reach; the trainer refuses a global batch that a world "
            "size from 1 to it does not divide",
            kElasticAgent, kInteger, 1, 65536},
    Setting{"TESSERA_LAUNCHER_PID", "unset (not under a launcher)",
            "the launcher's pid, which the trainer writes to <output_dir>/launcher.pid for tessera trace stacks",
            kLauncher, kInteger, 1, int64_t{1} << 31},
    Setting{"TESSERA_PROGRESS_FILE", "unset (not under a launcher)",
            "the file where the trainer records its steps for the launcher's wedge watch (dist/launcher/progress_file.h)",
            kLauncher},
    Setting{"TESSERA_LIVE_JOINER", "0",
            "1: this worker replaces a lost one of a live job and joins the running job (dist/live_membership.h)",
            kLauncher, kFlag},
    Setting{"TESSERA_HEARTBEAT_MS", "0 (no heartbeat)",
            "the process group's watchdog publishes a heartbeat this often (dist/heartbeat.h)", kElasticAgent, kInteger, 0, 3600000},
};

const Setting& registered(std::string_view name, SettingType type, const char* reader) {
  for (const Setting& s : kSettings) {
    if (s.name != name) continue;
    // env_setting reads any setting's text (a presence check); the typed readers only their own type.
    if (type != SettingType::kText && s.type != type)
      throw std::logic_error(std::string(reader) + ": " + std::string(name) + " is not registered as " +
                             (type == SettingType::kFlag ? "a flag" : "an integer") + " in tessera/util/settings.cpp");
    return s;
  }
  throw std::logic_error(std::string(reader) + ": " + std::string(name) +
                         " is not registered in tessera/util/settings.cpp");
}

const char* value_of(const Setting& s) {
  const char* value = std::getenv(std::string(s.name).c_str());
  return value != nullptr && *value != '\0' ? value : nullptr;
}

}  // namespace

std::span<const Setting> all_settings() { return kSettings; }

std::string accepted_values(const Setting& s) {
  switch (s.type) {
    case SettingType::kInteger: return detail::concat("integer ", s.min, " to ", s.max);
    case SettingType::kFlag: return "0 or 1";
    case SettingType::kText: break;
  }
  return "text";
}

const char* env_setting(std::string_view name) { return value_of(registered(name, SettingType::kText, "env_setting")); }

int64_t env_int(std::string_view name, int64_t fallback) {
  const Setting& s = registered(name, SettingType::kInteger, "env_int");
  const char* text = value_of(s);
  if (text == nullptr) return fallback;
  const std::string_view view(text);
  int64_t value = 0;
  const auto [end, error] = std::from_chars(view.data(), view.data() + view.size(), value);
  if (error != std::errc() || end != view.data() + view.size() || value < s.min || value > s.max)
    throw ValueError(detail::concat("[", name, "] expected an integer from ", s.min, " to ", s.max, ", got '", view,
                                    "' (", s.meaning, "; unset: ", s.default_value, ")"));
  return value;
}

bool env_flag(std::string_view name, bool fallback) {
  const Setting& s = registered(name, SettingType::kFlag, "env_flag");
  const char* text = value_of(s);
  if (text == nullptr) return fallback;
  std::string lower(text);
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  if (lower == "1" || lower == "true" || lower == "on" || lower == "yes") return true;
  if (lower == "0" || lower == "false" || lower == "off" || lower == "no") return false;
  throw ValueError(detail::concat("[", name, "] expected 1 or 0 (true/false, on/off, yes/no), got '", text, "' (",
                                  s.meaning, ")"));
}

}  // namespace tessera
