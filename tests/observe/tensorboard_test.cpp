#include "tessera/observe/tensorboard.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "tessera/train/config.h"
#include "tessera/train/trainer.h"
#include "testing/temp_dir.h"
#include "testing/tfrecord_reader.h"

namespace tessera::observe {
namespace {

namespace fs = std::filesystem;
using tessera::testing::fresh_dir;
using tessera::testing::read_event_file;

std::vector<std::string> event_files(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename().string().rfind("events.out.tfevents.", 0) == 0) out.push_back(e.path().string());
  return out;
}

TEST(TensorBoard, Crc32cIsCastagnolisAndAgreesWithTheBitwiseDefinition) {
  EXPECT_EQ(crc32c("123456789"), 0xE3069283u);  // the check value of CRC-32C
  EXPECT_EQ(crc32c(""), 0u);
  std::string bytes;
  for (int i = 0; i < 300; ++i) bytes += static_cast<char>(i * 7);
  EXPECT_EQ(crc32c(bytes), tessera::testing::crc32c_bitwise(bytes));
  EXPECT_EQ(masked_crc32c(bytes), tessera::testing::masked(tessera::testing::crc32c_bitwise(bytes)));
}

TEST(TensorBoard, AnEventFileReadsBackAsWrittenUnderTheSpecsReader) {
  const std::string dir = fresh_dir("TensorBoard", "roundtrip") + "/tb";
  std::string path;
  {
    TensorBoardWriter w(dir);
    path = w.path();
    w.write_scalars(1, {{"step/loss", 2.5}, {"step/lr", 1e-3}}, 1700000000.25);
    w.write_scalars(300, {{"epoch/eval_accuracy", 0.875}}, 1700000001.5);
    w.write_scalars(-2, {}, 0);
  }
  ASSERT_EQ(event_files(dir), std::vector<std::string>{path});
  const auto events = read_event_file(path);
  ASSERT_EQ(events.size(), 4u);
  EXPECT_EQ(events[0].file_version, "brain.Event:2");
  EXPECT_GT(events[0].wall_time, 1.6e9);
  EXPECT_EQ(events[1].step, 1);
  EXPECT_DOUBLE_EQ(events[1].wall_time, 1700000000.25);
  ASSERT_EQ(events[1].values.size(), 2u);
  EXPECT_EQ(events[1].values[0].tag, "step/loss");
  EXPECT_EQ(events[1].values[0].value, 2.5f);
  EXPECT_EQ(events[1].values[1].value, 1e-3f);
  EXPECT_EQ(events[2].step, 300);
  EXPECT_EQ(events[2].values[0].tag, "epoch/eval_accuracy");
  EXPECT_EQ(events[3].step, -2);
  EXPECT_TRUE(events[3].values.empty());

  // One flipped byte is caught by the CRC.
  std::string bytes = tessera::testing::read_text(path);
  bytes[bytes.size() - 6] ^= 0x20;
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  EXPECT_THROW(read_event_file(path), std::runtime_error);
}

TEST(TensorBoard, ScalarsOfARecordAreItsNumbersButStepAndEpoch) {
  auto s = scalars_of_record({{"type", "step"}, {"step", 3}, {"epoch", 0}, {"loss", 0.5}, {"lr", 0.01}, {"note", "x"}});
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0], (std::pair<std::string, double>{"step/loss", 0.5}));
  EXPECT_EQ(s[1].first, "step/lr");
}

TEST(TensorBoard, ATrainingRunWritesEveryMetricOfMetricsJsonl) {
  const std::string dir = fresh_dir("TensorBoard", "trainer");
  train::TrainConfig c = train::parse_config(
      "[model]\nname = \"mlp\"\nhidden = [16]\n[data]\ndataset = \"synthetic\"\nsamples = 256\ntest_samples = 64\n"
      "classes = 4\n[train]\nepochs = 1\nbatch_size = 32\nthreads = 1\nlog_every = 100\n",
      "test");
  c.train.output_dir = dir + "/run";
  c.observability.tensorboard = dir + "/tb";
  train::Trainer trainer(c);
  trainer.fit();
  const auto files = event_files(dir + "/tb");
  ASSERT_EQ(files.size(), 1u);
  const auto events = read_event_file(files[0]);
  // metrics.jsonl: the start record, 8 step records and 1 epoch record; each becomes one event after
  // the version.
  std::ifstream metrics(dir + "/run/metrics.jsonl");
  std::vector<nlohmann::json> records;
  for (std::string line; std::getline(metrics, line);) records.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(records.size(), 10u);
  ASSERT_EQ(events.size(), records.size() + 1);
  for (size_t i = 0; i < records.size(); ++i) {
    const auto& e = events[i + 1];
    EXPECT_EQ(e.step, records[i]["step"].get<int64_t>());
    const std::string type = records[i]["type"];
    for (const auto& v : e.values) {
      const std::string key = v.tag.substr(type.size() + 1);
      ASSERT_TRUE(records[i].contains(key)) << v.tag;
      EXPECT_EQ(v.value, static_cast<float>(records[i][key].get<double>())) << v.tag;
    }
  }
  EXPECT_EQ(events[1].values[0].tag, "start/world_size");
  EXPECT_EQ(events[2].values[0].tag, "step/loss");
  EXPECT_DOUBLE_EQ(events[2].wall_time, records[1]["unix_time"].get<double>());
  EXPECT_EQ(events.back().values.front().tag.rfind("epoch/", 0), 0u);
  bool accuracy = false;
  for (const auto& v : events.back().values) accuracy = accuracy || v.tag == "epoch/eval_accuracy";
  EXPECT_TRUE(accuracy);
}

}  // namespace
}  // namespace tessera::observe
