// Jobs across test hosts (scripts/cluster.sh: network, UTS, IPC and mount namespaces joined by a
// bridge, addresses in 198.18.0.0/15): each host runs `tessera run --nnodes 2 --node-rank i` as an
// operator would on real machines. The hosts cannot resolve each other's names and share no
// /dev/shm, so what crosses is the network alone. Skipped, with the reason, where namespaces cannot
// be made (not root, no unshare).
#include <gtest/gtest.h>

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <regex>
#include <string>

#include <nlohmann/json.hpp>

#include "tessera/io/checkpoint.h"
#include "tessera/ops/ops.h"
#include "testing/state_compare.h"
#include "testing/cluster.h"
#include "testing/temp_dir.h"
#include "testing/train_alone.h"

namespace tessera {
namespace {

using tessera::testing::Cluster;
const std::string& kCluster = tessera::testing::kClusterScript;

std::string write_config(const std::string& dir) {
  std::ofstream(dir + "/config.toml") << "[model]\nname = \"mlp\"\nhidden = [32, 16]\n"
                                      << "[data]\ndataset = \"synthetic\"\nsamples = 1024\ntest_samples = 128\nclasses = 4\n"
                                      << "[optimizer]\nname = \"sgd\"\nmomentum = 0.9\nlr = 0.01\n"
                                      << "[train]\nepochs = 1\nmax_steps = 20\nthreads = 1\nlog_every = 100\n"
                                      << "[distributed]\ntimeout_s = 20\n";
  return dir + "/config.toml";
}

struct NodeRun {
  int status = 0;
  std::string log;
};

// The shell line that starts node `node` (0-based) of a 2-host job in its host, in the background
// as $p<node>, bounded, its output in <dir>/<name>-node<node>.log. nproc 0: no --nproc-per-node (a
// parameter-server job gives --servers and --workers in run_args).
std::string start_node(const Cluster& cluster, const std::string& dir, const std::string& name, int node, int nproc,
                       const std::string& train_args, const std::string& run_args) {
  const std::string bin = TESSERA_BINARY;
  return "timeout -k 5 120 " +
         cluster.in(node + 1, bin + " run --nnodes 2 --node-rank " + std::to_string(node) +
                                  (nproc > 0 ? " --nproc-per-node " + std::to_string(nproc) : std::string()) +
                                  " --master-addr 198.18.0.1 --master-port 29500 " + run_args + " -- " + bin + " train " +
                                  dir + "/config.toml " + train_args) +
         " > " + dir + "/" + name + "-node" + std::to_string(node) + ".log 2>&1 & p" + std::to_string(node) + "=$!; ";
}

// Both nodes of a 2-host job, each `tessera run` in its own host, started together and bounded.
NodeRun run_two_hosts(const Cluster& cluster, const std::string& dir, const std::string& name, int nproc,
                      const std::string& env, const std::string& train_args, const std::string& run_args = "") {
  std::string script = "export TESSERA_JOB_TOKEN=0123456789abcdef0123456789abcdef " + env + "; ";
  for (int node = 0; node < 2; ++node) script += start_node(cluster, dir, name, node, nproc, train_args, run_args);
  script += "wait $p0; a=$?; wait $p1; b=$?; exit $((a > b ? a : b))";
  std::ofstream(dir + "/" + name + ".sh") << script << "\n";
  NodeRun r;
  const int status = std::system(("bash " + dir + "/" + name + ".sh").c_str());
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128;
  r.log = tessera::testing::read_text(dir + "/" + name + "-node0.log") + tessera::testing::read_text(dir + "/" + name + "-node1.log");
  return r;
}

using tessera::testing::train_alone;

// DDP across 2 hosts × 1 and 2 hosts × 2 processes equals one process on the global batch (the
// single-host DDP test's tolerance), for the MLP and the CNN. The first layout finds its interface by
// the route to the master, the second is given it (--iface eth0).
TEST(MultiHost, DdpAcrossHostsEqualsOneProcess) {
  const std::string dir = tessera::testing::fresh_dir("multihost", "ddp");
  Cluster cluster(2, dir);
  UP_OR_SKIP(cluster);
  write_config(dir);
  for (const std::string model : {"mlp", "cnn"}) {
    const std::string model_arg = " --set model.name=" + model;
    const nn::StateDict single = train_alone(dir, model + "-single", "--set train.batch_size=32" + model_arg);
    for (int nproc : {1, 2}) {
      const std::string out = dir + "/" + model + "-hosts2x" + std::to_string(nproc);
      NodeRun r = run_two_hosts(cluster, dir, model + "-x" + std::to_string(nproc), nproc, "",
                                "--set train.batch_size=" + std::to_string(32 / (2 * nproc)) +
                                    " --set train.output_dir=" + out + model_arg,
                                nproc == 2 ? "--iface eth0" : "");
      ASSERT_EQ(r.status, 0) << r.log;
      const nn::StateDict across = io::load_checkpoint(out + "/checkpoints").model.tensors;
      // The MLP within the single-host DDP test's 1e-5 absolute; the CNN's convolution gradients sum
      // 28×28 positions per sample, in another order per layout (1.4e-5 absolute measured), so it is
      // held to the model-parallel tests' 1e-4 relative per tensor.
      if (model == "mlp")
        EXPECT_LT(tessera::testing::max_state_difference(single, across), 1e-5) << "mlp, 2 hosts x " << nproc;
      else
        EXPECT_LT(tessera::testing::worst_relative_error(across, single), 1e-4) << "cnn, 2 hosts x " << nproc;
    }
  }
}

// The bytes host `host` has sent on its link to the bridge: eth0's transmit counter in its own
// network namespace's /proc/net/dev (sysfs shows the namespace it was mounted in).
int64_t link_tx_bytes(const Cluster& cluster, int host) {
  const std::string path = std::filesystem::temp_directory_path() / (cluster.name() + "-net.txt");
  EXPECT_EQ(std::system((cluster.in(host, "cat /proc/net/dev") + " > " + path).c_str()), 0);
  std::istringstream lines(tessera::testing::read_text(path));
  std::filesystem::remove(path);
  for (std::string line; std::getline(lines, line);) {
    const size_t colon = line.find(':');
    if (colon == std::string::npos || line.substr(0, colon).find("eth0") == std::string::npos) continue;
    std::istringstream fields(line.substr(colon + 1));
    int64_t value = 0;
    for (int k = 0; k < 9 && fields >> value; ++k) {
    }  // receive: bytes, packets, errs, drop, fifo, frame, compressed, multicast; then transmit bytes
    return value;
  }
  ADD_FAILURE() << "host " << host << " has no eth0 in /proc/net/dev";
  return 0;
}

// Hybrid sharding across 2 hosts × 2 ranks: equal to one process, and what crosses between the hosts
// is the gradient pieces alone: under ZeRO-3 across the same hosts (its gathers cross too) by half,
// and no more than DDP's all-reduce (the hosts' link counters over the whole run).
TEST(MultiHost, HybridShardingKeepsTheGathersInsideEachHost) {
  const std::string dir = tessera::testing::fresh_dir("multihost", "hsdp");
  Cluster cluster(2, dir);
  UP_OR_SKIP(cluster);
  write_config(dir);
  const std::string model = " --set model.hidden=[256,256]";  // 270,000 parameters: the gradients dominate the link
  const nn::StateDict single = train_alone(dir, "single", "--set train.batch_size=32" + model);
  std::map<std::string, int64_t> crossed;
  for (const auto& [name, args] : std::vector<std::pair<std::string, std::string>>{
           {"ddp", ""},
           {"zero3", " --set distributed.strategy=zero --set distributed.zero_stage=3"},
           {"hsdp", " --set distributed.strategy=hsdp --set distributed.zero_stage=3"}}) {
    const int64_t before = link_tx_bytes(cluster, 1) + link_tx_bytes(cluster, 2);
    const std::string out = dir + "/" + name;
    NodeRun r = run_two_hosts(cluster, dir, name, 2, "", "--set train.batch_size=8 --set train.output_dir=" + out + model + args);
    ASSERT_EQ(r.status, 0) << r.log;
    crossed[name] = link_tx_bytes(cluster, 1) + link_tx_bytes(cluster, 2) - before;
    EXPECT_LT(tessera::testing::max_state_difference(single, io::load_checkpoint(out + "/checkpoints").model.tensors), 1e-5) << name;
  }
  std::printf("bytes between the hosts over 20 steps: ddp %lld, zero-3 %lld, hsdp %lld\n",
              static_cast<long long>(crossed["ddp"]), static_cast<long long>(crossed["zero3"]),
              static_cast<long long>(crossed["hsdp"]));
  EXPECT_LT(crossed["hsdp"], crossed["zero3"] / 2);
  EXPECT_LT(crossed["hsdp"], crossed["ddp"] * 11 / 10);
}

// Parameter servers across 2 hosts × (a server and 2 workers): synchronous equals one process on the
// 4 workers' global batch; asynchronous finishes with every push of the 4 workers applied on both
// servers (80 updates each), no worker lost, and finite parameters.
TEST(MultiHost, ParameterServersWithTwoWorkersPerHostSyncAndAsync) {
  const std::string dir = tessera::testing::fresh_dir("multihost", "ps2x2");
  Cluster cluster(2, dir);
  UP_OR_SKIP(cluster);
  write_config(dir);
  const nn::StateDict single = train_alone(dir, "single", "--set train.batch_size=32");
  for (const std::string mode : {"sync", "async"}) {
    const std::string out = dir + "/" + mode;
    NodeRun r = run_two_hosts(cluster, dir, "ps-" + mode, 0, "",
                              "--set distributed.strategy=ps --set distributed.ps_mode=" + mode +
                                  " --set distributed.servers=2 --set train.batch_size=8 --set train.output_dir=" + out,
                              "--servers 1 --workers 2");
    ASSERT_EQ(r.status, 0) << mode << "\n" << r.log;
    const nn::StateDict across = io::load_checkpoint(out + "/checkpoints").model.tensors;
    if (mode == "sync") {
      EXPECT_LT(tessera::testing::max_state_difference(single, across), 1e-5);
      continue;
    }
    for (int server = 0; server < 2; ++server) {
      const auto report = nlohmann::json::parse(
          tessera::testing::read_text(out + "/ps/server-" + std::to_string(server) + ".json"), nullptr, false);
      ASSERT_TRUE(report.is_object()) << "server " << server << " wrote no report";
      EXPECT_EQ(report.value("updates", -1), 80) << "server " << server << ": " << report.dump();
      EXPECT_EQ(report.value("lost_workers", nlohmann::json::array()), nlohmann::json::array());
    }
    EXPECT_EQ(io::latest_checkpoint_step(out + "/checkpoints"), 20);
    for (const auto& [name, t] : across)
      EXPECT_TRUE(std::isfinite(sum(t).item<float>())) << name;
  }
}

// Synchronous parameter servers across 2 hosts (a server and a worker on each; workers reach both
// servers over the network) equal one process; so does a transformer pipeline cut across the hosts
// (PP=2, stage 0 on host 1 and stage 1 on host 2: activations and gradients cross the link),
// DP=2 × PP=2 on 2 hosts × 2 (a pipeline per host; the replicas' gradients cross), and the
// tensor-parallel layouts below.
TEST(MultiHost, ParameterServersAndPipelinesAcrossHostsEqualOneProcess) {
  const std::string dir = tessera::testing::fresh_dir("multihost", "ps_pp");
  Cluster cluster(2, dir);
  UP_OR_SKIP(cluster);
  write_config(dir);
  const nn::StateDict single = train_alone(dir, "single", "--set train.batch_size=32");
  NodeRun ps = run_two_hosts(cluster, dir, "ps", 0, "",
                             "--set distributed.strategy=ps --set distributed.ps_mode=sync --set distributed.servers=2 "
                             "--set train.batch_size=16 --set train.output_dir=" + dir + "/ps",
                             "--servers 1 --workers 1");
  ASSERT_EQ(ps.status, 0) << ps.log;
  EXPECT_LT(tessera::testing::max_state_difference(single, io::load_checkpoint(dir + "/ps/checkpoints").model.tensors), 1e-5);

  // The transformer on a small corpus: one process against DP=2 × PP=2 over 2 hosts × 2 processes.
  {
    std::ofstream corpus(dir + "/corpus.txt");
    for (int i = 0; i < 60; ++i) corpus << (i % 3 ? "to be or not to be, that is the question\n" : "all the world's a stage\n");
  }
  std::ofstream(dir + "/config.toml") << "[model]\nname = \"transformer\"\nlayers = 2\nheads = 4\nembed_dim = 16\ncontext = 8\n"
                                      << "dropout = 0.0\n[data]\ndataset = \"text\"\npath = \"" << dir << "/corpus.txt\"\n"
                                      << "[optimizer]\nname = \"sgd\"\nlr = 0.1\nmomentum = 0.9\nclip_grad_norm = 1.0\n"
                                      << "[train]\nepochs = 1\nmax_steps = 10\nthreads = 1\nlog_every = 100\n"
                                      << "[parallel]\nmicrobatches = 2\n[distributed]\ntimeout_s = 20\n";
  const nn::StateDict lm_single = train_alone(dir, "lm-single", "--set train.batch_size=8");
  for (int nproc : {1, 2}) {
    const std::string out = dir + "/lm-pp" + std::to_string(nproc);
    NodeRun pp = run_two_hosts(cluster, dir, "pp" + std::to_string(nproc), nproc, "",
                               "--set parallel.pp=2 --set train.batch_size=" + std::to_string(8 / nproc) +
                                   " --set train.output_dir=" + out);
    ASSERT_EQ(pp.status, 0) << pp.log;
    EXPECT_LT(tessera::testing::worst_relative_error(io::load_checkpoint(out + "/checkpoints").model.tensors, lm_single), 1e-4)
        << "2 hosts x " << nproc;
  }
  // Tensor parallelism: TP=2 cut across the hosts (every block's all-reduces cross the link), and
  // DP=2 × TP=2 on 2 hosts × 2 (the shards of a replica in one host; the replicas' gradients cross).
  for (int nproc : {1, 2}) {
    const std::string out = dir + "/lm-tp" + std::to_string(nproc);
    NodeRun tp = run_two_hosts(cluster, dir, "tp" + std::to_string(nproc), nproc, "",
                               "--set parallel.tp=2 --set parallel.schedule=gpipe --set train.batch_size=" +
                                   std::to_string(8 / nproc) + " --set train.output_dir=" + out);
    ASSERT_EQ(tp.status, 0) << tp.log;
    EXPECT_LT(tessera::testing::worst_relative_error(io::load_checkpoint(out + "/checkpoints").model.tensors, lm_single), 1e-4)
        << "TP, 2 hosts x " << nproc;
  }
}

// What used to crash (SIGSEGV inside gloo on a host name it cannot resolve) or bind blindly ends
// in an error that names what was tried and how to fix it; so does a master that is not there.
TEST(MultiHost, BadAddressesFailClearlyNeverCrash) {
  const std::string dir = tessera::testing::fresh_dir("multihost", "bad");
  Cluster cluster(2, dir);
  UP_OR_SKIP(cluster);
  write_config(dir);
  NodeRun wrong_iface = run_two_hosts(cluster, dir, "iface", 1, "TESSERA_SOCKET_IFNAME=eth9", "--set train.output_dir=" + dir + "/a");
  EXPECT_NE(wrong_iface.status, 0);
  EXPECT_NE(wrong_iface.log.find("TESSERA_SOCKET_IFNAME=eth9: this machine has no interface of that name"), std::string::npos)
      << wrong_iface.log;
  EXPECT_NE(wrong_iface.log.find("eth0 198.18.0."), std::string::npos) << wrong_iface.log;  // the ones there are
  EXPECT_EQ(wrong_iface.log.find("SIGSEGV"), std::string::npos) << wrong_iface.log;
  // host2's name resolves nowhere (each host knows only itself).
  NodeRun unresolvable = run_two_hosts(cluster, dir, "name", 1, "TESSERA_GLOO_HOST=host2", "--set train.output_dir=" + dir + "/b");
  EXPECT_NE(unresolvable.status, 0);
  EXPECT_NE(unresolvable.log.find("TESSERA_GLOO_HOST 'host2' does not resolve"), std::string::npos) << unresolvable.log;
  EXPECT_EQ(unresolvable.log.find("SIGSEGV"), std::string::npos) << unresolvable.log;
  // A master that is not there (no host has 198.18.0.9): node 1 gives up within its timeout (3 s),
  // naming the address it tried and what to check.
  const auto start = std::chrono::steady_clock::now();
  const std::string bin = TESSERA_BINARY;
  const int status = std::system(
      ("TESSERA_JOB_TOKEN=0123456789abcdef0123456789abcdef timeout -k 5 60 " +
       cluster.in(2, bin + " run --nnodes 2 --node-rank 1 --nproc-per-node 1 --master-addr 198.18.0.9 --master-port 29500 -- " +
                         bin + " train " + dir + "/config.toml --set distributed.timeout_s=3 --set train.output_dir=" + dir + "/c") +
       " > " + dir + "/absent.log 2>&1").c_str());
  const std::string absent = tessera::testing::read_text(dir + "/absent.log");
  EXPECT_NE(status, 0) << absent;
  EXPECT_NE(absent.find("could not connect to the store at 198.18.0.9:29500 within 3000 ms"), std::string::npos) << absent;
  EXPECT_NE(absent.find("are MASTER_ADDR/MASTER_PORT right?"), std::string::npos) << absent;
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30)) << absent;
}

// A link taken down mid-run (host 2's interface) ends the job within the configured timeout, each
// side saying what it waited in: host 1 names the collective and the rank (and host) that never
// arrived, host 2 that it cannot reach the store either, so it is the one cut off. Never a hang.
TEST(MultiHost, ALinkDownMidRunIsReportedWithinTheTimeout) {
  const std::string dir = tessera::testing::fresh_dir("multihost", "link");
  Cluster cluster(2, dir);
  UP_OR_SKIP(cluster);
  write_config(dir);
  const std::string out = dir + "/out";
  // The job, in the background; once step 5 is in the metrics, host 2's link goes down (the wait for
  // step 5 is bounded: 10 s).
  std::string script = "export TESSERA_JOB_TOKEN=0123456789abcdef0123456789abcdef; ";
  for (int node = 0; node < 2; ++node)
    script += start_node(cluster, dir, "link", node, 1,
                         "--set train.max_steps=100000 --set train.epochs=1000 --set distributed.timeout_s=4 "
                         "--set distributed.debug_slow_rank=0 --set distributed.debug_slow_ms=20 --set train.output_dir=" +
                             out,
                         "");
  script += "for i in $(seq 200); do grep -q '\"step\":5,' " + out + "/metrics.jsonl 2>/dev/null && break; sleep 0.05; done; " +
            "start=$(date +%s); " + cluster.in(2, "ip link set eth0 down") + "; " +
            "wait $p0; a=$?; wait $p1; b=$?; echo \"exit $a $b after $(( $(date +%s) - start )) s\"";
  std::ofstream(dir + "/link.sh") << script << "\n";
  ASSERT_EQ(std::system(("bash " + dir + "/link.sh > " + dir + "/link.log 2>&1").c_str()), 0);
  const std::string summary = tessera::testing::read_text(dir + "/link.log");
  const std::string host1 = tessera::testing::read_text(dir + "/link-node0.log"),
                    host2 = tessera::testing::read_text(dir + "/link-node1.log");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(summary, m, std::regex("exit (\\d+) (\\d+) after (\\d+) s"))) << summary;
  EXPECT_NE(m[1], "0") << host1;
  EXPECT_NE(m[2], "0") << host2;
  EXPECT_NE(m[1], "124") << "host 1 hung until the test's own timeout\n" << host1;
  EXPECT_NE(m[2], "124") << "host 2 hung until the test's own timeout\n" << host2;
  // The collective timeout is 4 s; the store's connection timeout and the reports add a few more.
  EXPECT_LT(std::stoi(m[3]), 60) << summary;
  EXPECT_NE(host1.find("rank(s) that never arrived"), std::string::npos) << host1;
  EXPECT_NE(host1.find("rank 1 on host2"), std::string::npos) << host1;
  EXPECT_NE(host2.find("(on host2) cannot reach the store either"), std::string::npos) << host2;
}

// The elastic jobs over 3 hosts: a synthetic MLP of 320 steps (2 epochs of 160 global batches of
// 12, checkpoints every 5), rank 0 slowed by 20 ms a step, written to <dir>/config.toml.
void write_elastic_config(const std::string& dir, int timeout_s) {
  std::ofstream(dir + "/config.toml") << "[model]\nname = \"mlp\"\nhidden = [32]\n"
                                      << "[data]\ndataset = \"synthetic\"\nsamples = 1920\ntest_samples = 64\nclasses = 4\n"
                                      << "[optimizer]\nname = \"sgd\"\nmomentum = 0.9\nlr = 0.02\n"
                                      << "[train]\nepochs = 2\nglobal_batch_size = 12\ncheckpoint_every = 5\nthreads = 1\n"
                                      << "log_every = 1000\noutput_dir = \"" << dir << "/run\"\n[distributed]\ntimeout_s = "
                                      << timeout_s << "\n";
}

// The agents' three logs read together (node ranks are dealt anew each generation), and a shell
// line that waits, at most 60 s, for `pattern` to appear in them.
std::string elastic_logs(const std::string& dir) {
  return "cat " + dir + "/agent1.log " + dir + "/agent2.log " + dir + "/agent3.log 2>/dev/null";
}
std::string wait_for_log(const std::string& dir, const std::string& pattern) {
  return "for i in $(seq 1200); do " + elastic_logs(dir) + " | grep -q '" + pattern + "' && break; sleep 0.05; done; ";
}

// The shell lines that start one agent per host (1 to 3, the rendezvous store on host 1) in the
// background as $a1..$a3, each bounded at 240 s and logging to <dir>/agent<host>.log.
std::string start_elastic_agents(const Cluster& cluster, const std::string& dir, const std::string& agent_args,
                                 const std::string& train_args) {
  const std::string bin = TESSERA_BINARY;
  std::string script = "export TESSERA_JOB_TOKEN=0123456789abcdef0123456789abcdef; ";
  for (int host = 1; host <= 3; ++host)
    script += "timeout -k 5 240 " +
              cluster.in(host, bin + " run --nnodes 1:3 --nproc-per-node 1 --rdzv-backend store --rdzv-endpoint " +
                                   "198.18.0.1:29400 --heartbeat-timeout 3 --last-call 1 --grace-period 2 " + agent_args +
                                   " -- " + bin + " train " + dir + "/config.toml --resume auto " +
                                   "--set distributed.debug_slow_rank=0 --set distributed.debug_slow_ms=20 " +
                                   "--set distributed.live_membership=off " + train_args) +
              " > " + dir + "/agent" + std::to_string(host) + ".log 2>&1 & a" + std::to_string(host) + "=$!; " +
              (host == 1 ? wait_for_log(dir, "hosting the rendezvous store") : std::string());
  return script;
}

// An elastic job over 3 hosts (one agent each, the rendezvous on host 1) survives a worker killed
// with SIGKILL on host 3 and then the loss of host 2 (every process in it killed), and finishes.
TEST(MultiHost, AnElasticJobSurvivesAKilledWorkerAndALostHost) {
  const std::string dir = tessera::testing::fresh_dir("multihost", "elastic");
  Cluster cluster(3, dir);
  UP_OR_SKIP(cluster);
  write_elastic_config(dir, 10);
  std::string script = start_elastic_agents(cluster, dir, "--rdzv-id mh",
                                            "--set distributed.debug_kill_rank=2 --set distributed.debug_kill_step=10");
  // The host to lose: the one besides host 1 whose agent is still in the job (the killed worker's
  // agent has none left and only waits).
  script += wait_for_log(dir, "recovery: generation 1 ") + "victim=3; survivor=2; grep -q 'generation 1:' " + dir +
            "/agent2.log && victim=2 && survivor=3; env TESSERA_CLUSTER=" + cluster.name() + " bash " + kCluster +
            " kill host$victim; " + wait_for_log(dir, "recovery: generation 2 ") +
            "wait $a1; r1=$?; eval wait \\$a$survivor; r2=$?; echo \"exit $r1 $r2\"";
  std::ofstream(dir + "/elastic.sh") << script << "\n";
  std::system(("bash " + dir + "/elastic.sh > " + dir + "/elastic.log 2>&1").c_str());
  const std::string summary = tessera::testing::read_text(dir + "/elastic.log");
  const std::string log = tessera::testing::read_text(dir + "/agent1.log") + tessera::testing::read_text(dir + "/agent2.log") +
                          tessera::testing::read_text(dir + "/agent3.log");
  EXPECT_NE(summary.find("exit 0 0"), std::string::npos) << summary << log;
  EXPECT_NE(log.find("3 agent(s), 3 worker(s)"), std::string::npos) << log;
  EXPECT_NE(log.find("ended (failure): rank 2"), std::string::npos) << log;  // the killed worker
  // The lost host: found by its worker's broken connections or its agent's silence, whichever first.
  EXPECT_NE(log.find("generation 2: 1 agent(s), 1 worker(s)"), std::string::npos) << log;
  EXPECT_EQ(io::latest_checkpoint_step(dir + "/run/checkpoints"), 320) << log;
}

// An elastic job over 3 hosts whose third host is cut off mid-run (its link taken down, the host and
// its processes left running): the other two see its agent's heartbeats stop or its worker's
// collectives time out, start a generation of 2 and finish; the cut-off host's agent ends on its own
// (it cannot reach the rendezvous: its store calls time out, then reconnecting fails within
// --join-timeout) instead of hanging.
TEST(MultiHost, AnElasticJobSurvivesALinkDown) {
  const std::string dir = tessera::testing::fresh_dir("multihost", "elastic_link");
  Cluster cluster(3, dir);
  UP_OR_SKIP(cluster);
  write_elastic_config(dir, 5);
  std::string script = start_elastic_agents(cluster, dir, "--rdzv-id mhlink --join-timeout 10", "");
  // Once the job of 3 has written step 10, host 3's link goes down (the wait is bounded: 60 s).
  script += "for i in $(seq 1200); do [ -e " + dir + "/run/checkpoints/step-00000010 ] && break; sleep 0.05; done; " +
            cluster.in(3, "ip link set eth0 down") + "; " +
            "wait $a1; r1=$?; wait $a2; r2=$?; wait $a3; r3=$?; echo \"exit $r1 $r2 $r3\"";
  std::ofstream(dir + "/elastic.sh") << script << "\n";
  std::system(("bash " + dir + "/elastic.sh > " + dir + "/elastic.log 2>&1").c_str());
  const std::string summary = tessera::testing::read_text(dir + "/elastic.log");
  const std::string log = tessera::testing::read_text(dir + "/agent1.log") + tessera::testing::read_text(dir + "/agent2.log") +
                          tessera::testing::read_text(dir + "/agent3.log");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(summary, m, std::regex("exit (\\d+) (\\d+) (\\d+)"))) << summary << log;
  EXPECT_EQ(m[1], "0") << log;
  EXPECT_EQ(m[2], "0") << log;
  EXPECT_NE(m[3], "0") << "the cut-off host cannot have finished the job\n" << log;
  EXPECT_NE(m[3], "124") << "the cut-off host's agent hung until the test's own timeout\n" << log;
  EXPECT_NE(log.find("3 agent(s), 3 worker(s)"), std::string::npos) << log;
  EXPECT_NE(log.find("2 agent(s), 2 worker(s)"), std::string::npos) << log;
  EXPECT_EQ(io::latest_checkpoint_step(dir + "/run/checkpoints"), 320) << log;
}

// No single point of failure in the rendezvous: etcd as a cluster of three members, one in each of
// the job's 3 hosts, and every agent given all three. An etcd member killed (on a host that is not
// node 0's) changes nothing: the job trains on in the same generation, its agents' requests going to
// the other members. With that member back, the host of node 0 is lost whole (its agent, its worker,
// the generation's worker store and its etcd member): the other two agents, on the two members left
// (a majority), start a generation of 2 from the survivors' save, losing no step, and finish.
TEST(MultiHost, AnEtcdClusterInTheJobsHostsLosesAMemberAndNodeZerosHostAndTheJobGoesOn) {
  if (::access("/usr/bin/etcd", X_OK) != 0) GTEST_SKIP() << "etcd is not installed (scripts/setup.sh: etcd-server)";
  const std::string dir = tessera::testing::fresh_dir("multihost", "etcd3");
  Cluster cluster(3, dir);
  UP_OR_SKIP(cluster);
  std::ofstream(dir + "/config.toml") << "[model]\nname = \"mlp\"\nhidden = [32]\n"
                                      << "[data]\ndataset = \"synthetic\"\nsamples = 3840\ntest_samples = 64\nclasses = 4\n"
                                      << "[optimizer]\nname = \"sgd\"\nmomentum = 0.9\nlr = 0.02\n"
                                      << "[train]\nepochs = 2\nglobal_batch_size = 12\ncheckpoint_every = 5\nthreads = 1\n"
                                      << "log_every = 1000\noutput_dir = \"" << dir << "/run\"\n[distributed]\ntimeout_s = 10\n";
  const std::string bin = TESSERA_BINARY;
  const std::string members = "198.18.0.1:2379,198.18.0.2:2379,198.18.0.3:2379";
  auto etcd = [&](int h) {
    const std::string ip = "http://198.18.0." + std::to_string(h);
    return "timeout -k 5 300 " +
           cluster.in(h, "/usr/bin/etcd --name e" + std::to_string(h) + " --data-dir " + dir + "/etcd" + std::to_string(h) +
                             " --listen-client-urls " + ip + ":2379 --advertise-client-urls " + ip + ":2379" +
                             " --listen-peer-urls " + ip + ":2380 --initial-advertise-peer-urls " + ip + ":2380" +
                             " --initial-cluster e1=http://198.18.0.1:2380,e2=http://198.18.0.2:2380,e3=http://198.18.0.3:2380" +
                             " --initial-cluster-state new") +
           " >> " + dir + "/etcd" + std::to_string(h) + ".log 2>&1 & ";
  };
  auto kill_in = [&](const std::string& what) { return "env TESSERA_CLUSTER=" + cluster.name() + " bash " + kCluster + " " + what + "; "; };
  // Bounded waits (at most 60 s each) for a file or for a line in the agents' logs.
  auto wait_file = [&](const std::string& path) {
    return "for i in $(seq 1200); do [ -e " + path + " ] && break; sleep 0.05; done; ";
  };
  std::string script = "export TESSERA_JOB_TOKEN=0123456789abcdef0123456789abcdef; ";
  for (int h = 1; h <= 3; ++h) script += etcd(h);
  for (int h = 1; h <= 3; ++h)
    script += "timeout -k 5 300 " +
              cluster.in(h, bin + " run --nnodes 2:3 --nproc-per-node 1 --rdzv-backend etcd --rdzv-endpoint " + members +
                                " --rdzv-id mhetcd --heartbeat-timeout 3 --last-call 1 --grace-period 2 --join-timeout 30 -- " +
                                bin + " train " + dir + "/config.toml --resume auto --set distributed.debug_slow_rank=0 " +
                                "--set distributed.debug_slow_ms=20 --set distributed.live_membership=off") +
              " > " + dir + "/agent" + std::to_string(h) + ".log 2>&1 & a" + std::to_string(h) + "=$!; ";
  // Node 0's host, then an etcd member on another host killed once the job of 3 has written step 10.
  script += wait_for_log(dir, "generation 0: 3 agent(s)") + wait_file(dir + "/run/checkpoints/step-00000010") +
            "node0=$(grep -l 'generation 0: 3 agent(s), 3 worker(s); node 0 runs' " + dir +
            "/agent1.log " + dir + "/agent2.log " + dir + "/agent3.log | head -1 | sed 's/.*agent\\([0-9]\\).log/\\1/'); " +
            // Member 1, the one every agent asks first, unless it shares node 0's host.
            "member=1; [ \"$node0\" = 1 ] && member=2; echo \"node0 $node0 member $member\"; " +
            kill_in("signal host$member KILL --name") +
            // The job goes on: 30 more steps in the same generation.
            "s=$(ls " + dir + "/run/checkpoints | grep -c step-); " +
            wait_file(dir + "/run/checkpoints/step-00000040") +
            "echo \"after the member: $(" + elastic_logs(dir) + " | grep -c 'generation 1:') new generation(s)\"; " +
            // The member back (same data directory: it rejoins), then node 0's host lost, whole.
            "case $member in 1) " + etcd(1) + ";; 2) " + etcd(2) + ";; 3) " + etcd(3) + ";; esac; " +
            "for i in $(seq 1200); do [ $(grep -c 'ready to serve client requests' " + dir +
            "/etcd$member.log) -ge 2 ] && break; sleep 0.05; done; " +
            "date +%s.%N > " + dir + "/host_lost_at; " + kill_in("kill host$node0") +
            wait_for_log(dir, "recovery: generation 1 ") +
            "r=0; for h in 1 2 3; do [ $h = $node0 ] && continue; eval wait \\$a$h || r=$?; done; echo \"survivors exit $r\"";
  std::ofstream(dir + "/job.sh") << script << "\n";
  std::system(("bash " + dir + "/job.sh > " + dir + "/job.log 2>&1").c_str());
  const std::string summary = tessera::testing::read_text(dir + "/job.log");
  const std::string log = tessera::testing::read_text(dir + "/agent1.log") + tessera::testing::read_text(dir + "/agent2.log") +
                          tessera::testing::read_text(dir + "/agent3.log");
  std::printf("%s", summary.c_str());
  EXPECT_NE(summary.find("after the member: 0 new generation(s)"), std::string::npos)
      << "an etcd member's loss must not restart the job\n" << summary << log;
  EXPECT_NE(summary.find("survivors exit 0"), std::string::npos) << summary << log;
  EXPECT_NE(log.find("generation 1: 2 agent(s), 2 worker(s)"), std::string::npos) << log;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(log, m, std::regex("recovery: generation 1 [^\\n]*"))) << log;
  const std::string recovery = m.str();
  std::printf("%s\n", recovery.c_str());
  EXPECT_NE(recovery.find("steps lost: 0"), std::string::npos) << recovery;
  EXPECT_EQ(io::latest_checkpoint_step(dir + "/run/checkpoints"), 640) << log;
  // From the host's loss to the survivors training again: the newest start in the metrics.
  const double lost_at = std::stod(tessera::testing::read_text(dir + "/host_lost_at"));
  double resumed_at = 0;
  std::istringstream metrics(tessera::testing::read_text(dir + "/run/metrics.jsonl"));
  for (std::string line; std::getline(metrics, line);) {
    const auto record = nlohmann::json::parse(line);
    if (record.value("type", "") == "start") resumed_at = std::max(resumed_at, record.value("unix_time", 0.0));
  }
  std::printf("node 0's host lost -> survivors training again: %.2f s\n", resumed_at - lost_at);
  EXPECT_GT(resumed_at, lost_at) << "no start after the host was lost";
  EXPECT_LT(resumed_at - lost_at, 30.0) << "the survivors took longer than the heartbeat and join timeouts allow";
}

// Preflight: with host 3's link shaped to 100 Mbit/s and the others unshaped, `tessera doctor`
// measures the 3 links and names the two through host 3 as slow, not the other; `tessera run
// --preflight` runs it before the job and then starts the job.
TEST(MultiHost, PreflightNamesTheSlowLink) {
  const std::string dir = tessera::testing::fresh_dir("multihost", "doctor");
  if (::geteuid() != 0) GTEST_SKIP() << "test hosts need root (network namespaces, veth, tc)";
  const std::string name = tessera::testing::unique_cluster_name('d');
  const std::string cluster = "env TESSERA_CLUSTER=" + name + " bash " + kCluster;
  struct Down {
    std::string cmd;
    ~Down() { std::system((cmd + " down > /dev/null 2>&1").c_str()); }
  } down{cluster};
  if (std::system((cluster + " up 3 --slow host3=100mbit > " + dir + "/cluster.log 2>&1").c_str()) != 0)
    GTEST_SKIP() << "could not make test hosts here: " << tessera::testing::read_text(dir + "/cluster.log");
  const std::string bin = TESSERA_BINARY;
  auto run_nodes = [&](const std::string& tag, int nodes, const std::string& tail) {
    std::string script = "export TESSERA_JOB_TOKEN=0123456789abcdef0123456789abcdef; ";
    for (int node = 0; node < nodes; ++node)
      script += "timeout -k 5 120 " + cluster + " exec host" + std::to_string(node + 1) + " " + bin + " run --nnodes " +
                std::to_string(nodes) + " --node-rank " + std::to_string(node) +
                " --nproc-per-node 1 --master-addr 198.18.0.1 --master-port 29500 " + tail + " > " + dir + "/" + tag +
                std::to_string(node) + ".log 2>&1 & p" + std::to_string(node) + "=$!; ";
    script += "s=0; for p in";
    for (int node = 0; node < nodes; ++node) script += " $p" + std::to_string(node);
    script += "; do wait $p || s=1; done; exit $s";
    std::ofstream(dir + "/" + tag + ".sh") << script << "\n";
    return std::system(("bash " + dir + "/" + tag + ".sh").c_str());
  };
  ASSERT_EQ(run_nodes("doctor", 3, "-- " + bin + " doctor --bytes 1048576"), 0) << tessera::testing::read_text(dir + "/doctor0.log");
  const std::string table = tessera::testing::read_text(dir + "/doctor0.log");
  EXPECT_NE(table.find("preflight: 3 link(s)"), std::string::npos) << table;
  EXPECT_NE(table.find("slow link: host1 (rank 0) <-> host3 (rank 2)"), std::string::npos) << table;
  EXPECT_NE(table.find("slow link: host2 (rank 1) <-> host3 (rank 2)"), std::string::npos) << table;
  // The unshaped link is the fastest; whether a busy machine's scheduling makes its round trips look
  // slow is the verdict's business, checked with fixed figures in tests/dist/preflight_verdict_test.cpp.
  EXPECT_EQ(table.find("slow link: host1 (rank 0) <-> host2 (rank 1) carries"), std::string::npos) << table;
  // --preflight, then the job itself (here a program that succeeds), on the two unshaped hosts.
  ASSERT_EQ(run_nodes("preflight", 2, "--preflight -- true"), 0) << tessera::testing::read_text(dir + "/preflight0.log");
  const std::string log = tessera::testing::read_text(dir + "/preflight0.log");
  EXPECT_NE(log.find("preflight: 1 link(s)"), std::string::npos) << log;
  EXPECT_NE(log.find("no link is more than 2x slower"), std::string::npos) << log;
}

}  // namespace
}  // namespace tessera
