// The chaos run (long tier): an elastic job over 4 test hosts, its rendezvous in etcd on a fifth,
// takes 20 faults drawn from a seeded schedule, each at a drawn step: a worker killed (SIGKILL), a
// worker stopped (SIGSTOP), a host's link down for 5 s, a host lost (every process in it killed),
// and the host of node 0 lost (the workers' store and rank 0 with it). After each fault the job
// must recover by itself; then the host is replaced (what is left of it killed, a new agent started)
// and the job grows back to 4. It must finish every step, lose none at any recovery, never hang
// (every wait is bounded), print one line per fault and per recovery, and end with the accuracy of
// undisturbed runs: within 3 standard deviations of their seed-to-seed spread, which the test
// measures and prints beside the issue's 0.5 points.
//
// The same schedule runs twice: on the restart path (`distributed.live_membership = "off"`: every
// fault ends a generation), and with live membership (the agents' default for DDP): a worker killed
// or stopped is then dropped by its peers, which go on in their processes, and its agent's
// replacement joins them; a fault that takes an agent (a host lost, or cut off long enough) still
// ends the generation. Only a host whose agent went is replaced by the test.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tessera/io/checkpoint.h"
#include "testing/cluster.h"
#include "testing/temp_dir.h"

namespace tessera {
namespace {

using tessera::testing::Cluster;
using tessera::testing::read_text;
using Clock = std::chrono::steady_clock;

constexpr int kAgentHosts = 4;          // hosts 2..5; host 1 runs etcd
constexpr int kFaults = 20;
constexpr int kEpochs = 10, kStepsPerEpoch = 500;  // Fashion-MNIST's 60000 in global batches of 120
// Faults fall in the first steps; each (detection, recovery, a new agent, the job grown back) takes
// 4 to 10 s while the job trains on at up to 40 steps/s (rank 0 is slowed by 25 ms a step), so the
// rest of the run leaves room for every fault even on a loaded machine.
constexpr int64_t kLastFaultStep = 2000;
const std::string kToken = "0123456789abcdef0123456789abcdef";

std::string write_config(const std::string& dir, int seed, const std::string& out) {
  const std::string path = dir + "/config-" + std::to_string(seed) + ".toml";
  std::ofstream(path) << "[model]\nname = \"mlp\"\nhidden = [128]\n"
                      << "[optimizer]\nname = \"sgd\"\nmomentum = 0.9\nlr = 0.05\n"
                      << "[train]\nepochs = " << kEpochs << "\nglobal_batch_size = 120\ncheckpoint_every = 20\n"
                      << "threads = 1\nlog_every = 1\nseed = " << seed << "\noutput_dir = \"" << out << "\"\n"
                      << "[distributed]\ntimeout_s = 10\n";
  return path;
}

double final_accuracy(const std::string& log) {
  std::smatch m;
  return std::regex_search(log, m, std::regex("final test accuracy ([0-9.]+)%")) ? std::stod(m[1]) : -1.0;
}

// Waits (polling, bounded by `seconds`) until `done` holds; false if it never did.
template <typename F>
bool wait_until(F done, double seconds) {
  const auto deadline = Clock::now() + std::chrono::duration<double>(seconds);
  while (!done()) {
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return true;
}

class ChaosRun {
 public:
  ChaosRun(const Cluster& cluster, std::string dir, std::string config, bool live)
      : cluster_(cluster), dir_(std::move(dir)), config_(std::move(config)), live_(live) {}

  void start_etcd() {
    const std::string url = "http://198.18.0.1:";
    run_background(1, "/usr/bin/etcd --name chaos --data-dir " + dir_ + "/etcd --listen-client-urls " + url + "2379 " +
                          "--advertise-client-urls " + url + "2379 --listen-peer-urls " + url + "2380 " +
                          "--initial-advertise-peer-urls " + url + "2380 --initial-cluster chaos=" + url + "2380",
                      dir_ + "/etcd.log");
  }

  // A new agent in `host` (2..5), its log a file of its own.
  void start_agent(int host) {
    const std::string log = dir_ + "/agent" + std::to_string(host) + "-" + std::to_string(agents_started_++) + ".log";
    logs_.push_back(log);
    const std::string bin = TESSERA_BINARY;
    run_background(host,
                   bin + " run --nnodes 2:" + std::to_string(kAgentHosts) + " --nproc-per-node 1 --rdzv-backend etcd " +
                       "--rdzv-endpoint 198.18.0.1:2379 --rdzv-id chaos --max-restarts 200 --heartbeat-timeout 3 " +
                       "--last-call 1 --join-timeout 10 --grace-period 2 -- " + bin + " train " + config_ +
                       " --resume auto --set distributed.debug_slow_rank=0 --set distributed.debug_slow_ms=25 " +
                       "--set distributed.live_membership=" + (live_ ? "auto" : "off"),
                   log);
  }
  // Whether the newest agent started in `host` has left the job: a worker killed by a signal (a
  // stalled one, too) loses its slot, and an agent without workers goes.
  bool agent_left(int host) const {
    for (auto it = logs_.rbegin(); it != logs_.rend(); ++it)
      if (it->find("/agent" + std::to_string(host) + "-") != std::string::npos)
        return read_text(*it).find("no workers left on this node") != std::string::npos;
    return false;
  }
  std::string all_logs() const {
    std::string text;
    for (const auto& log : logs_) text += read_text(log);
    return text;
  }
  int count(const std::string& pattern) const {
    const std::string text = all_logs();
    const std::regex re(pattern);
    return static_cast<int>(std::distance(std::sregex_iterator(text.begin(), text.end(), re), std::sregex_iterator()));
  }
  // The newest generation number that started with all 4 agents (-1 if none yet).
  int newest_full_generation() const {
    const std::string text = all_logs();
    int newest = -1;
    const std::regex re("generation (\\d+): " + std::to_string(kAgentHosts) + " agent\\(s\\)");
    for (auto it = std::sregex_iterator(text.begin(), text.end(), re); it != std::sregex_iterator(); ++it)
      newest = std::max(newest, std::stoi((*it)[1]));
    return newest;
  }
  // The host whose agent is node 0 of the newest generation (the workers' store and rank 0), or 0.
  int node0_host() const {
    int best_generation = -1, host = 0;
    for (const auto& log : logs_) {
      const std::string text = read_text(log);
      const std::regex re("generation (\\d+): \\d+ agent\\(s\\), \\d+ worker\\(s\\); node 0 runs");
      for (auto it = std::sregex_iterator(text.begin(), text.end(), re); it != std::sregex_iterator(); ++it)
        if (std::stoi((*it)[1]) > best_generation) {
          best_generation = std::stoi((*it)[1]);
          host = std::stoi(log.substr(log.rfind("/agent") + 6, 1));
        }
    }
    return host;
  }
  // The newest step in the run's metrics (-1 before the first record).
  int64_t step() const {
    const std::string text = read_text(dir_ + "/run/metrics.jsonl");
    int64_t newest = -1;
    const std::regex re("\"step\":(\\d+)");
    for (auto it = std::sregex_iterator(text.begin(), text.end(), re); it != std::sregex_iterator(); ++it)
      newest = std::max<int64_t>(newest, std::stoll((*it)[1]));
    return newest;
  }
  bool finished() const { return count("job finished") > 0; }
  void shell(const std::string& command) const { std::system(("timeout -k 2 30 " + command + " >/dev/null 2>&1").c_str()); }

 private:
  void run_background(int host, const std::string& command, const std::string& log) {
    std::system(("export TESSERA_JOB_TOKEN=" + kToken + "; timeout -k 5 900 " + cluster_.in(host, command) + " > " + log +
                 " 2>&1 &")
                    .c_str());
  }

  const Cluster& cluster_;
  std::string dir_, config_;
  bool live_ = false;
  std::vector<std::string> logs_;
  int agents_started_ = 0;
};

void run_chaos(const std::string& name, bool live) {
  if (::access("/usr/share/datasets/fashion-mnist", R_OK) != 0)
    GTEST_SKIP() << "Fashion-MNIST is not installed (scripts/setup.sh installs dataset-fashion-mnist)";
  if (::access("/usr/bin/etcd", X_OK) != 0) GTEST_SKIP() << "etcd is not installed (scripts/setup.sh: etcd-server)";
  const std::string dir = tessera::testing::fresh_dir("chaos", name);
  Cluster cluster(1 + kAgentHosts, dir);
  UP_OR_SKIP(cluster);

  // Undisturbed references on this machine: 4 workers, seeds 1..3, same configuration.
  std::vector<double> calm;
  for (int seed = 1; seed <= 3; ++seed) {
    const std::string out = dir + "/calm" + std::to_string(seed);
    const std::string cmd = "timeout -k 5 600 " + std::string(TESSERA_BINARY) + " run --nproc-per-node 4 -- " +
                            TESSERA_BINARY + " train " + write_config(dir, seed, out) + " > " + out + ".log 2>&1";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << read_text(out + ".log");
    calm.push_back(final_accuracy(read_text(out + ".log")));
  }

  ChaosRun job(cluster, dir, write_config(dir, 1, dir + "/run"), live);
  job.start_etcd();
  for (int host = 2; host <= 1 + kAgentHosts; ++host) job.start_agent(host);
  ASSERT_TRUE(wait_until([&] { return job.newest_full_generation() >= 0 && job.step() >= 0; }, 90)) << job.all_logs();

  // The schedule: 20 steps spread over the run, each with a fault and a host, from one seed
  // (TESSERA_CHAOS_SEED draws another schedule; the default is the one the suite runs).
  const char* seed_text = std::getenv("TESSERA_CHAOS_SEED");
  char* seed_end = nullptr;
  const unsigned schedule_seed = seed_text ? static_cast<unsigned>(std::strtoul(seed_text, &seed_end, 10)) : 2026u;
  ASSERT_TRUE(seed_text == nullptr || (*seed_text != '\0' && *seed_end == '\0'))
      << "TESSERA_CHAOS_SEED must be a non-negative integer, got '" << seed_text << "'";
  std::printf("chaos: fault schedule seed %u\n", schedule_seed);
  std::mt19937 rng(schedule_seed);
  std::vector<int64_t> at;
  for (int i = 0; i < kFaults; ++i)
    at.push_back(std::uniform_int_distribution<int64_t>(40, kLastFaultStep)(rng));
  std::sort(at.begin(), at.end());
  const char* kinds[] = {"kill -9 of a worker", "SIGSTOP of a worker", "link down for 5 s", "host lost",
                         "node 0's host lost (the workers' store)"};
  int faults_done = 0;
  // A live membership change's line (rank 0's), and one whose world is whole again.
  const std::string live_change = "\\[live\\] epoch \\d+: \\d+ rank";
  const std::string live_world_whole = "\\[live\\] epoch \\d+: " + std::to_string(kAgentHosts) + " rank";
  for (int i = 0; i < kFaults; ++i) {
    ASSERT_TRUE(wait_until([&] { return job.step() >= at[i] || job.finished(); }, 120))
        << "the job did not reach step " << at[i] << "\n" << job.all_logs();
    ASSERT_FALSE(job.finished()) << "the job finished before fault " << i + 1 << " (step " << at[i] << ")";
    const int kind = std::uniform_int_distribution<int>(0, 4)(rng);
    int host = std::uniform_int_distribution<int>(2, 1 + kAgentHosts)(rng);
    if (kind == 4) host = job.node0_host();
    ASSERT_GE(host, 2) << job.all_logs();
    const int recoveries = job.count("recovery: generation"), full = job.newest_full_generation();
    const int live_changes = job.count(live_change), live_full = job.count(live_world_whole);
    std::printf("chaos: fault %d/%d at step %lld: %s on host%d\n", i + 1, kFaults, static_cast<long long>(job.step()),
                kinds[kind], host);
    std::fflush(stdout);
    const std::string h = "host" + std::to_string(host);
    switch (kind) {
      case 0: job.shell(cluster.script("signal " + h + " KILL train")); break;
      case 1: job.shell(cluster.script("signal " + h + " STOP train")); break;
      case 2:
        job.shell(cluster.in(host, "ip link set eth0 down"));
        // The fault's length (not a synchronisation): longer than the heartbeat timeout, so the job
        // must notice; a shorter cut is ridden out by TCP's retransmissions.
        std::this_thread::sleep_for(std::chrono::seconds(5));
        job.shell(cluster.in(host, "ip link set eth0 up"));
        break;
      default: job.shell(cluster.script("kill " + h)); break;
    }
    ASSERT_TRUE(wait_until([&] {
      return job.count("recovery: generation") > recoveries || job.count(live_change) > live_changes || job.finished();
    }, 90)) << "no recovery within 90 s of fault " << i + 1 << "\n" << job.all_logs();
    // Live: where the host's agent still runs, it replaces its worker itself, and the replacement
    // joins the running job (the world back to 4). Otherwise (a generation ended), the host is
    // replaced: what is left of it goes, a new agent joins, and the job grows back to 4.
    // Taken live where the peers went on and no generation ended: a worker's fault while its agent
    // runs. (One that comes while a generation starts, before its workers said they run live, takes
    // the restart path, which drops the killed worker's slot.)
    const bool live_recovery = live && (kind == 0 || kind == 1) && job.count(live_change) > live_changes &&
                               job.count("recovery: generation") == recoveries;
    if (live_recovery) {
      ASSERT_TRUE(wait_until([&] {
        return job.count(live_world_whole) > live_full || job.newest_full_generation() > full || job.finished();
      }, 90)) << "the live job did not grow back to " << kAgentHosts << " workers after fault " << i + 1 << "\n"
              << job.all_logs();
      std::printf("chaos: fault %d: live recovery, the replacement joined\n", i + 1);
    } else {
      job.shell(cluster.script("kill " + h));
      job.shell(cluster.in(host, "ip link set eth0 up"));
      job.start_agent(host);
      // A host whose agent left with the recovery (its worker, waiting for the faulted one while the
      // generation started, was taken for stalled and killed) is replaced too.
      for (int other = 2; other <= 1 + kAgentHosts; ++other)
        if (other != host && job.agent_left(other)) {
          std::printf("chaos: fault %d: host%d's agent left with it; replaced too\n", i + 1, other);
          job.shell(cluster.script("kill host" + std::to_string(other)));
          job.start_agent(other);
        }
      ASSERT_TRUE(wait_until([&] { return job.newest_full_generation() > full || job.finished(); }, 90))
          << "the job did not grow back to " << kAgentHosts << " agents after fault " << i + 1 << "\n" << job.all_logs();
    }
    ++faults_done;
  }
  ASSERT_TRUE(wait_until([&] { return job.finished(); }, 400)) << job.all_logs();
  const std::string log = job.all_logs();
  // One line per recovery (each agent that was node 0 logs its own; a line can appear in two logs).
  std::set<std::string> recoveries;
  const std::regex re("recovery: generation [^\\n]*");
  for (auto it = std::sregex_iterator(log.begin(), log.end(), re); it != std::sregex_iterator(); ++it)
    recoveries.insert(it->str());
  // Where the agent knows rank 0's count, it must show nothing lost. Where that count went with a
  // lost machine, the metrics show it: rank 0 writes a step once every rank has completed it (after
  // the stop flag's all-reduce), so a completed step lost and trained again appears twice.
  for (const auto& line : recoveries) {
    std::printf("chaos: %s\n", line.c_str());
    EXPECT_TRUE(line.find("steps lost: 0") != std::string::npos || line.find("steps lost: unknown") != std::string::npos)
        << line;
  }
  {
    std::set<int64_t> seen;
    const std::string metrics = read_text(dir + "/run/metrics.jsonl");
    const std::regex step_re("\"type\":\"step\"");
    std::istringstream lines(metrics);
    for (std::string line; std::getline(lines, line);) {
      std::smatch m;
      if (!std::regex_search(line, step_re) || !std::regex_search(line, m, std::regex("\"step\":(\\d+)"))) continue;
      EXPECT_TRUE(seen.insert(std::stoll(m[1])).second) << "step " << m[1] << " was completed twice (lost once)";
    }
    EXPECT_GE(seen.size(), static_cast<size_t>(kEpochs * kStepsPerEpoch * 9 / 10)) << "steps missing from the metrics";
  }
  // Each fault is a generation's recovery or a live membership change (a loss and an admission).
  const std::string live_loss = "\\[live\\] epoch \\d+: \\d+ rank\\(s\\) go on \\(were " + std::to_string(kAgentHosts);
  const int live_losses = job.count(live_loss);
  std::printf("chaos: %zu generation recoveries, %d live losses\n", recoveries.size(), live_losses);
  EXPECT_GE(static_cast<int>(recoveries.size()) + live_losses, kFaults);
  if (live) {
    EXPECT_GT(live_losses, 0) << "no fault was recovered live";
  }
  EXPECT_EQ(faults_done, kFaults);
  EXPECT_EQ(io::latest_checkpoint_step(dir + "/run/checkpoints"), kEpochs * kStepsPerEpoch) << log;
  double mean = 0, var = 0;
  for (double a : calm) mean += a / calm.size();
  for (double a : calm) var += (a - mean) * (a - mean) / (calm.size() - 1);
  const double chaos = final_accuracy(log), tolerance = 3 * std::sqrt(var);
  std::printf("chaos: %d faults survived; accuracy %.2f%% against undisturbed seed 1 %.2f%% (seeds 1-3: %.2f, %.2f, "
              "%.2f; sd %.2f, tolerance %.2f points; the issue's bound 0.5)\n",
              faults_done, chaos, calm[0], calm[0], calm[1], calm[2], std::sqrt(var), tolerance);
  EXPECT_LE(std::fabs(chaos - calm[0]), tolerance) << log;
}

TEST(ChaosLongTier, AnElasticJobOnFourHostsSurvivesTwentySeededFaults) { run_chaos("run", false); }

TEST(ChaosLongTier, ALiveElasticJobOnFourHostsSurvivesTheSameFaults) { run_chaos("live", true); }

}  // namespace
}  // namespace tessera
