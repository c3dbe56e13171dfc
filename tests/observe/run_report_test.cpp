#include "tessera/observe/run_report.h"

#include <gtest/gtest.h>
#include <png.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>

#include "tessera/core/error.h"
#include "tessera/observe/svg_chart.h"
#include "testing/temp_dir.h"

namespace tessera::observe {
namespace {

using nlohmann::json;
using tessera::testing::fresh_dir;
using tessera::testing::read_text;

size_t count(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

// A DDP-like run: two epochs of 5 steps, then a resumption at step 8 (steps 8-10 done again).
RunRecords sample_run() {
  RunRecords run;
  auto step = [&](int s, double t) {
    run.records.push_back({{"type", "step"}, {"step", s}, {"loss", 2.0 / s}, {"samples_per_s", 1000.0 + s},
                           {"comm_ms", 4.0}, {"exposed_comm_ms", 1.0}, {"unix_time", 1000.0 + t}});
  };
  run.records.push_back({{"type", "start"}, {"step", 0}, {"resumed", false}, {"world_size", 2}, {"unix_time", 1000.0}});
  for (int s = 1; s <= 5; ++s) step(s, s);
  run.records.push_back({{"type", "epoch"}, {"step", 5}, {"eval_accuracy", 0.8}, {"eval_loss", 0.6}});
  for (int s = 6; s <= 10; ++s) step(s, s);
  run.records.push_back({{"type", "start"}, {"step", 7}, {"resumed", true}, {"world_size", 1}, {"unix_time", 1020.0}});
  for (int s = 8; s <= 10; ++s) step(s, 12 + s);
  run.records.push_back({{"type", "epoch"}, {"step", 10}, {"eval_accuracy", 0.9125}, {"eval_loss", 0.3}});
  run.skipped.push_back("line 99: not a JSON object");
  return run;
}

TEST(RunReport, ThePageSummarisesTheRunAndPlotsEachSeries) {
  const std::string html = report_html(sample_run(), "run <x>");
  EXPECT_NE(html.find("<title>run &lt;x&gt;</title>"), std::string::npos);
  EXPECT_NE(html.find("<tr><th>steps</th><td>10</td></tr>"), std::string::npos) << html.substr(0, 2000);
  EXPECT_NE(html.find("<tr><th>epochs completed</th><td>2</td></tr>"), std::string::npos);
  EXPECT_NE(html.find("91.25%"), std::string::npos);
  EXPECT_NE(html.find("<tr><th>of it hidden behind backward</th><td>75.0%</td></tr>"), std::string::npos);
  EXPECT_NE(html.find("<tr><th>starts / of them resumptions</th><td>2 / 1</td></tr>"), std::string::npos);
  EXPECT_NE(html.find("<tr><th>steps done again after a resumption</th><td>3</td></tr>"), std::string::npos);
  EXPECT_NE(html.find("<td>resumed</td><td>1</td>"), std::string::npos);
  EXPECT_NE(html.find("line 99: not a JSON object"), std::string::npos);
  // Loss, accuracy, loss against time, throughput, communication: five charts, no memory chart.
  EXPECT_EQ(count(html, "<svg "), 5u);
  EXPECT_EQ(count(html, "aria-label=\"Memory"), 0u);
  // The per-step loss line has a point per step record (13), the test loss a marker per epoch.
  std::smatch m;
  ASSERT_TRUE(std::regex_search(html, m, std::regex("data-name=\"training \\(per step\\)\"[^>]*points=\"([^\"]*)\"")));
  EXPECT_EQ(count(m[1].str(), ","), 13u);
  EXPECT_EQ(count(html, "class=\"marker\" data-name=\"test (per epoch)\""), 2u);
  EXPECT_EQ(html.find("<script"), std::string::npos);  // self-contained and static
}

// A mixture of experts' routing: a line per expert's share and one for the dropped choices, and the
// busiest expert against an even share.
TEST(RunReport, AMixtureOfExpertsRunShowsTheRoutersLoad) {
  RunRecords run;
  for (int s = 1; s <= 4; ++s)
    run.records.push_back(json{{"type", "step"},
                               {"step", s},
                               {"loss", 1.0},
                               {"moe_expert_load", {0.5, 0.3, 0.2}},
                               {"moe_load_max_over_mean", 1.5},
                               {"moe_dropped_fraction", 0.01}});
  const std::string html = report_html(run, "moe");
  EXPECT_EQ(count(html, "aria-label=\"Mixture of experts"), 2u) << html;
  for (const char* line : {"expert 0", "expert 1", "expert 2", "dropped", "worst layer"})
    EXPECT_NE(html.find(std::string("data-name=\"") + line + "\""), std::string::npos) << line;
  EXPECT_EQ(count(report_html(sample_run(), "ddp"), "Mixture of experts"), 0u);  // no mixture, no chart
}

TEST(RunReport, ChartsScaleIntoTheirBoxAndSayWhenEmpty) {
  Chart c{"t", "x", "y"};
  c.series.push_back({"s", "#000", {{0, 0}, {10, 100}}});
  const std::string svg = render_svg(c);
  // The first point at the bottom left of the plot area, the last at its top right (5% headroom).
  EXPECT_NE(svg.find("points=\"64.0,"), std::string::npos) << svg;
  EXPECT_NE(svg.find("704.0,"), std::string::npos) << svg;
  Chart empty{"nothing", "x", "y"};
  EXPECT_NE(render_svg(empty).find("no data"), std::string::npos);
  const auto ticks = nice_ticks(0, 1, 5);  // 0, 0.2, ..., 1
  ASSERT_EQ(ticks.size(), 6u);
  EXPECT_NEAR(ticks[1], 0.2, 1e-12);
  EXPECT_NEAR(ticks.back(), 1.0, 1e-12);
  EXPECT_EQ(nice_ticks(3, 97, 4), (std::vector<double>{50}));  // 23.5 apart asked: 50 is the next 1-2-5 step
  EXPECT_EQ(nice_ticks(5, 5, 4).size(), 1u);
}

TEST(RunReport, AMissingRunIsNamed) {
  const std::string dir = fresh_dir("RunReport", "missing");
  try {
    write_run_report(dir + "/nope");
    FAIL() << "no error";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("holds no metrics.jsonl"), std::string::npos);
  }
}

// The fraction of a PNG's pixels that are not white; -1 when it cannot be read.
double ink_fraction(const std::string& path) {
  png_image image{};
  image.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_file(&image, path.c_str())) return -1;
  image.format = PNG_FORMAT_GRAY;
  std::vector<unsigned char> pixels(PNG_IMAGE_SIZE(image));
  if (!png_image_finish_read(&image, nullptr, pixels.data(), 0, nullptr)) return -1;
  size_t ink = 0;
  for (unsigned char p : pixels) ink += p < 240 ? 1 : 0;
  return static_cast<double>(ink) / static_cast<double>(pixels.size());
}

TEST(RunReport, AReportOfARealRunRendersInHeadlessChromium) {
  const char* chromium = "/usr/bin/chromium";
  if (!std::filesystem::exists(chromium)) GTEST_SKIP() << "chromium is not installed (scripts/setup.sh installs it)";
  const std::string dir = fresh_dir("RunReport", "chromium");
  std::ofstream(dir + "/config.toml") << "[model]\nname = \"mlp\"\nhidden = [16]\n[data]\ndataset = \"synthetic\"\n"
                                         "samples = 512\ntest_samples = 64\nclasses = 4\n[train]\nepochs = 2\n"
                                         "batch_size = 32\nthreads = 1\nlog_every = 100\noutput_dir = \"" << dir << "/run\"\n";
  ASSERT_EQ(std::system((std::string(TESSERA_BINARY) + " train " + dir + "/config.toml > " + dir + "/train.log 2>&1").c_str()), 0)
      << read_text(dir + "/train.log");
  ASSERT_EQ(std::system((std::string(TESSERA_BINARY) + " report " + dir + "/run > " + dir + "/report.log 2>&1").c_str()), 0)
      << read_text(dir + "/report.log");
  const std::string page = dir + "/run/report.html";
  ASSERT_TRUE(std::filesystem::exists(page));
  // Headless Chromium draws the page; its console would log any error of the page to stderr.
  const std::string shot = dir + "/report.png", log = dir + "/chromium.log";
  const std::string cmd = "timeout 120 " + std::string(chromium) +
                          " --headless --no-sandbox --disable-gpu --hide-scrollbars --enable-logging=stderr --v=0"
                          " --user-data-dir=" + dir + "/profile --window-size=800,1800 --screenshot=" + shot +
                          " file://" + page + " > " + log + " 2>&1";
  const int status = std::system(cmd.c_str());
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << read_text(log);
  const double ink = ink_fraction(shot);
  EXPECT_GT(ink, 0.01) << "the screenshot is blank; " << read_text(log);
  EXPECT_LT(ink, 0.9) << "the screenshot is all ink";
  EXPECT_EQ(read_text(log).find("CONSOLE"), std::string::npos) << read_text(log);
}

}  // namespace
}  // namespace tessera::observe
