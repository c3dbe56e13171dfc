#include "tessera/observe/trace.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <nlohmann/json.hpp>
#include <thread>

#include "tessera/core/error.h"
#include "tessera/io/atomic_file.h"
#include "testing/temp_dir.h"

namespace tessera::observe {
namespace {

using nlohmann::json;
using tessera::testing::fresh_dir;
using tessera::testing::read_text;

// The trace event format's rules for what tessera writes (JSON Object Format; complete events "X"
// and metadata events "M"): a reason for the first event that breaks one, or "".
std::string format_problem(const json& trace) {
  if (!trace.is_object() || !trace.contains("traceEvents") || !trace["traceEvents"].is_array())
    return "not an object with a traceEvents array";
  for (const auto& e : trace["traceEvents"]) {
    if (!e.is_object()) return "an event is not an object";
    if (!e.contains("name") || !e["name"].is_string()) return "an event without a name: " + e.dump();
    if (!e.contains("ph") || !e["ph"].is_string()) return "an event without ph: " + e.dump();
    if (!e.contains("pid") || !e["pid"].is_number_integer() || !e.contains("tid") || !e["tid"].is_number_integer())
      return "an event without integer pid and tid: " + e.dump();
    const std::string ph = e["ph"];
    if (ph == "X") {
      if (!e.contains("ts") || !e["ts"].is_number() || !e.contains("dur") || !e["dur"].is_number() ||
          e["dur"].get<double>() < 0)
        return "a complete event without ts and a non-negative dur: " + e.dump();
    } else if (ph == "M") {
      const std::string n = e["name"];
      if (n != "process_name" && n != "thread_name" && n != "process_sort_index") return "unknown metadata " + n;
      if (!e.contains("args") || !e["args"].is_object()) return "metadata without args: " + e.dump();
    } else {
      return "an event of phase " + ph;
    }
  }
  return "";
}

TEST(Trace, SpansAreRecordedOnlyWhileEnabledAndNestInTime) {
  take_trace();
  enable_tracing(false);
  { TraceSpan s("ignored", "test"); }
  enable_tracing(true);
  name_trace_thread("main");
  {
    TraceSpan outer("outer", "test");
    { TraceSpan inner("inner", "test"); }
    std::thread([] {
      name_trace_thread("helper");
      TraceSpan other("on another thread", "test");
    }).join();
  }
  enable_tracing(false);
  TraceBuffer b = take_trace();
  ASSERT_EQ(b.events.size(), 3u);
  EXPECT_EQ(b.events[0].name, "inner");  // recorded when they end
  EXPECT_EQ(b.events[1].name, "on another thread");
  EXPECT_EQ(b.events[2].name, "outer");
  EXPECT_GE(b.events[0].start_us, b.events[2].start_us);
  EXPECT_LE(b.events[0].start_us + b.events[0].duration_us, b.events[2].start_us + b.events[2].duration_us + 1);
  EXPECT_NE(b.events[1].thread, b.events[2].thread);
  const json trace = json::parse(chrome_trace_json(b, 3));
  EXPECT_EQ(format_problem(trace), "");
  int names = 0;
  for (const auto& e : trace["traceEvents"]) {
    EXPECT_EQ(e["pid"], 3);
    if (e["name"] == "thread_name") ++names;
  }
  EXPECT_GE(names, 2);
  EXPECT_TRUE(take_trace().events.empty());
}

TEST(Trace, MergingPutsEveryRankOnOneTimeline) {
  const std::string dir = fresh_dir("Trace", "merge");
  TraceBuffer a, b;
  a.events.push_back({"late", "train", 300, 10, 0});
  b.events.push_back({"early", "train", 100, 10, 0});
  write_chrome_trace(dir + "/rank-0.json", a, 0);
  write_chrome_trace(dir + "/rank-1.json", b, 1);
  const json merged = json::parse(merge_chrome_traces({dir + "/rank-0.json", dir + "/rank-1.json"}));
  EXPECT_EQ(format_problem(merged), "");
  std::vector<std::string> order;
  std::set<int> pids;
  for (const auto& e : merged["traceEvents"]) {
    pids.insert(e["pid"].get<int>());
    if (e["ph"] == "X") order.push_back(e["name"]);
  }
  EXPECT_EQ(order, (std::vector<std::string>{"early", "late"}));
  EXPECT_EQ(pids, (std::set<int>{0, 1}));
  std::ofstream(dir + "/bad.json") << "{\"not\": 1}";
  EXPECT_THROW(merge_chrome_traces({dir + "/bad.json"}), ValueError);
}

struct Span {
  std::string name;
  double start, end;
};

TEST(Trace, ADdpStepsEventsNestAndItsAllReducesEndBeforeTheOptimizer) {
  const std::string dir = fresh_dir("Trace", "ddp");
  std::ofstream(dir + "/config.toml") << "[model]\nname = \"mlp\"\nhidden = [64, 32]\n[data]\ndataset = \"synthetic\"\n"
                                         "samples = 512\ntest_samples = 64\nclasses = 4\n[train]\nepochs = 1\n"
                                         "batch_size = 16\nthreads = 1\nlog_every = 100\nmax_steps = 4\noutput_dir = \""
                                      << dir << "/run\"\n";
  const std::string log = dir + "/train.log";
  ASSERT_EQ(std::system((std::string(TESSERA_BINARY) + " train " + dir + "/config.toml --nproc 2 --trace > " + log +
                         " 2>&1").c_str()),
            0)
      << read_text(log);
  ASSERT_EQ(std::system((std::string(TESSERA_BINARY) + " trace merge " + dir + "/run/trace > " + dir + "/merge.log 2>&1").c_str()), 0)
      << read_text(dir + "/merge.log");
  const json timeline = json::parse(read_text(dir + "/run/trace/timeline.json"));
  ASSERT_EQ(format_problem(timeline), "");
  for (int rank : {0, 1}) {
    std::vector<Span> train, comm;
    for (const auto& e : timeline["traceEvents"]) {
      if (e["ph"] != "X" || e["pid"] != rank) continue;
      const double ts = e["ts"].get<double>(), end = ts + e["dur"].get<double>();
      (e["cat"] == "comm" ? comm : train).push_back({e["name"], ts, end});
    }
    std::vector<Span> steps;
    for (const auto& s : train)
      if (s.name.rfind("step ", 0) == 0) steps.push_back(s);
    ASSERT_EQ(steps.size(), 4u) << "rank " << rank;
    for (const auto& step : steps) {
      // forward, backward, optimizer: inside the step, in that order.
      std::map<std::string, Span> in;
      for (const auto& s : train)
        if (s.start >= step.start && s.end <= step.end + 1 && s.name != step.name) in[s.name] = s;
      ASSERT_TRUE(in.count("forward") && in.count("backward") && in.count("optimizer"))
          << "rank " << rank << " " << step.name;
      EXPECT_LE(in["forward"].end, in["backward"].start + 1);
      EXPECT_LE(in["backward"].end, in["optimizer"].start + 1);
      // The gradient all-reduces: started during backward, finished before the optimizer ran.
      int reductions = 0;
      for (const auto& c : comm)
        if (c.name.rfind("allreduce", 0) == 0 && c.start >= in["backward"].start && c.start < in["optimizer"].start) {
          ++reductions;
          EXPECT_LE(c.end, in["optimizer"].start + 1) << c.name << " of " << step.name << " on rank " << rank;
        }
      EXPECT_GE(reductions, 1) << step.name << " on rank " << rank;
    }
    bool data = false;
    for (const auto& s : train) data = data || s.name == "data";
    EXPECT_TRUE(data);
  }
}

// A two-stage pipeline: each stage's micro-batches appear as compute spans, and the time a stage waits
// for its neighbour as "bubble" spans inside them: the last stage waits for each micro-batch's
// activations in its forward, the first for each gradient in its backward.
TEST(Trace, APipelinesMicroBatchesAndItsBubblesAreOnTheTimeline) {
  const std::string dir = fresh_dir("Trace", "pipeline");
  {
    std::ofstream corpus(dir + "/corpus.txt");
    for (int i = 0; i < 60; ++i) corpus << (i % 3 ? "to be or not to be, that is the question\n" : "all the world's a stage\n");
  }
  std::ofstream(dir + "/config.toml") << "[model]\nname = \"transformer\"\nlayers = 2\nheads = 4\nembed_dim = 16\ncontext = 8\n"
                                         "dropout = 0.0\n[data]\ndataset = \"text\"\npath = \"" << dir << "/corpus.txt\"\n"
                                         "[train]\nepochs = 1\nbatch_size = 8\nmax_steps = 3\nthreads = 1\nlog_every = 100\noutput_dir = \""
                                      << dir << "/run\"\n[parallel]\npp = 2\nmicrobatches = 2\n";
  const std::string log = dir + "/train.log";
  ASSERT_EQ(std::system((std::string(TESSERA_BINARY) + " train " + dir + "/config.toml --nproc 2 --trace > " + log +
                         " 2>&1").c_str()),
            0)
      << read_text(log);
  for (int rank : {0, 1}) {
    const json trace = json::parse(read_text(dir + "/run/trace/rank-" + std::to_string(rank) + ".json"));
    ASSERT_EQ(format_problem(trace), "");
    std::vector<Span> compute, bubbles, sends;
    for (const auto& e : trace["traceEvents"]) {
      if (e["ph"] != "X") continue;
      const double ts = e["ts"].get<double>(), end = ts + e["dur"].get<double>();
      const std::string name = e["name"];
      if (e["cat"] == "bubble") bubbles.push_back({name, ts, end});
      if (e["cat"] == "pipeline") (name.rfind("send", 0) == 0 ? sends : compute).push_back({name, ts, end});
    }
    int forwards = 0, backwards = 0;
    for (const auto& c : compute) {
      forwards += c.name.rfind("forward micro-batch", 0) == 0;
      backwards += c.name.rfind("backward micro-batch", 0) == 0;
    }
    EXPECT_EQ(forwards, 3 * 2) << "rank " << rank;   // 3 steps of 2 micro-batches
    EXPECT_EQ(backwards, 3 * 2) << "rank " << rank;
    EXPECT_FALSE(sends.empty()) << "rank " << rank;
    // The stage's wait for its neighbour, nested in the micro-batch's compute span.
    const std::string outer = rank == 1 ? "forward micro-batch 0" : "backward micro-batch 0";
    const std::string wait = rank == 1 ? "wait for micro-batch 0 from stage 0" : "wait for the gradient of micro-batch 0 from stage 1";
    int nested = 0;
    for (const auto& b : bubbles)
      if (b.name == wait)
        for (const auto& c : compute) nested += c.name == outer && b.start >= c.start && b.end <= c.end + 1;
    EXPECT_EQ(nested, 3) << "rank " << rank << ": '" << wait << "' inside '" << outer << "' once per step";
  }
}

}  // namespace
}  // namespace tessera::observe
