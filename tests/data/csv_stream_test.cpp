// Tables read where they lie (data/csv_stream.h): the byte-range shares of any number of replicas
// hold every row once and read back exactly what load_csv reads; bad rows name their file and line
// wherever the share starts; a file changed after its scan is an error, never other rows.
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <random>
#include <set>

#include "tessera/core/error.h"
#include "tessera/data/csv.h"
#include "tessera/data/csv_stream.h"
#include "tessera/data/sampler.h"
#include "testing/temp_dir.h"

namespace tessera::data {
namespace {

std::string write_file(const std::string& dir, const std::string& name, const std::string& text) {
  std::ofstream(dir + "/" + name) << text;
  return dir + "/" + name;
}

// Rows of uneven length (so that share boundaries fall inside rows), blank lines and CRLF endings.
std::string uneven_table(int rows, uint64_t seed, int first_id) {
  std::mt19937_64 rng(seed);
  std::string text = "a,label, b\r\n";
  for (int i = 0; i < rows; ++i) {
    text += std::to_string(first_id + i) + "," + std::to_string(rng() % 3) + "," +
            std::string(rng() % 7, '0') + std::to_string(rng() % 100000) + (i % 5 == 0 ? "\r\n" : "\n");
    if (rng() % 11 == 0) text += "  \n";
  }
  return text;
}

// Every row of every share, in share order, as (features, label) of one flat list each.
void read_all_shares(StreamingCsv& table, int count, std::vector<float>& features, std::vector<int64_t>& labels) {
  for (int index = 0; index < count; ++index) {
    table.select_share(index, count);
    if (table.size() == 0) continue;
    std::vector<int64_t> all(static_cast<size_t>(table.size()));
    for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int64_t>(i);
    Batch b = table.get_batch(all);
    for (float v : b.inputs.to_vector<float>()) features.push_back(v);
    for (int64_t v : b.targets.to_vector<int64_t>()) labels.push_back(v);
  }
}

TEST(StreamingCsv, TheSharesOfAnyNumberOfReplicasHoldEveryRowOnceAsLoadCsvReadsThem) {
  const std::string dir = tessera::testing::fresh_dir("csv_stream", "shares");
  const std::vector<std::string> files = {write_file(dir, "p0.csv", uneven_table(203, 1, 0)),
                                          write_file(dir, "p1.csv", "a,label, b\n"),  // a header alone
                                          write_file(dir, "p2.csv", uneven_table(1, 2, 203)),
                                          write_file(dir, "p3.csv", uneven_table(97, 3, 204))};
  CsvTable whole = load_csv(files);
  StreamingCsv table(files, {});
  EXPECT_EQ(table.feature_columns(), (std::vector<std::string>{"a", "b"}));
  for (int count : {1, 2, 3, 5, 8, 64, 301}) {
    std::vector<float> features;
    std::vector<int64_t> labels;
    read_all_shares(table, count, features, labels);
    EXPECT_EQ(features, whole.data->inputs().to_vector<float>()) << count << " shares";
    EXPECT_EQ(labels, whole.data->targets().to_vector<int64_t>()) << count << " shares";
  }
}

TEST(StreamingCsv, ABatchInAnyOrderWithRepeatsEqualsTheLoadedRows) {
  const std::string dir = tessera::testing::fresh_dir("csv_stream", "batch");
  const std::string path = write_file(dir, "t.csv", uneven_table(500, 4, 0));
  CsvTable whole = load_csv({path});
  StreamingCsv table({path}, {});
  table.select_share(0, 1);
  ASSERT_EQ(table.size(), 500);
  std::vector<int64_t> indices = {499, 0, 31, 32, 33, 31, 250, 64, 499, 1};
  std::mt19937_64 rng(5);
  for (int i = 0; i < 200; ++i) indices.push_back(static_cast<int64_t>(rng() % 500));
  Batch streamed = table.get_batch(indices);
  Batch loaded = whole.data->get_batch(indices);
  EXPECT_EQ(streamed.inputs.to_vector<float>(), loaded.inputs.to_vector<float>());
  EXPECT_EQ(streamed.targets.to_vector<int64_t>(), loaded.targets.to_vector<int64_t>());
  EXPECT_THROW(table.get_batch({500}), IndexError);
  EXPECT_THROW(table.get_batch({-1}), IndexError);

  CsvOptions regression;
  regression.label = "b";
  regression.regression = true;
  StreamingCsv values({path}, regression);
  values.select_share(0, 1);
  EXPECT_EQ(values.get_batch(indices).targets.to_vector<float>(),
            load_csv({path}, regression).data->get_batch(indices).targets.to_vector<float>());
}

void expect_refused_at_scan(const std::string& path, int share, int shares, const std::string& expected,
                            int64_t max_classes = 0) {
  try {
    StreamingCsv table({path}, {}, max_classes);
    table.select_share(share, shares);
    ADD_FAILURE() << "scanned; expected an error with: " << expected;
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
  }
}

TEST(StreamingCsv, ABadRowNamesItsFileAndLineFromAShareDeepInTheFile) {
  const std::string dir = tessera::testing::fresh_dir("csv_stream", "bad");
  std::string text = "x,label\n";
  for (int i = 0; i < 1000; ++i) text += "1.5,1\n";
  // Row 1500 (line 1502) lies in the second of two shares, which starts near row 1000.
  const std::string missing = write_file(dir, "missing.csv", text + text.substr(8, 500 * 6) + "NA,0\n" + text.substr(8));
  expect_refused_at_scan(missing, 1, 2, "missing.csv:1502: column \"x\" holds \"NA\", not a number");
  // The first share does not reach it: its rows are fine.
  StreamingCsv first({missing}, {});
  EXPECT_NO_THROW(first.select_share(0, 4));
  expect_refused_at_scan(write_file(dir, "class.csv", text + "1,7\n"), 0, 1, "class.csv:1002: label 7 is not a class id (an integer in [0, 3))", 3);
  expect_refused_at_scan(write_file(dir, "fields.csv", text + "1,0,2\n"), 0, 1, "fields.csv:1002: 3 fields, the header has 2");
  try {
    StreamingCsv table({write_file(dir, "one.csv", "x,label\n1,0\n"), write_file(dir, "two.csv", "y,label\n1,0\n")}, {});
    ADD_FAILURE() << "opened tables whose columns differ";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("two.csv:1: its columns differ from"), std::string::npos) << e.what();
  }
  EXPECT_THROW(StreamingCsv({dir + "/absent.csv"}, {}), IoError);
  EXPECT_THROW(StreamingCsv({write_file(dir, "blank.csv", "\n \n")}, {}), IoError);  // no header, no rows
  EXPECT_THROW(StreamingCsv({write_file(dir, "long.csv", "x,label\n" + std::string(StreamingCsv::kMaxLineBytes + 10, '1'))}, {}).select_share(0, 1), IoError);
}

TEST(StreamingCsv, AFileChangedAfterItsScanIsAnErrorNeverOtherRows) {
  const std::string dir = tessera::testing::fresh_dir("csv_stream", "changed");
  std::string text = "x,label\n";
  for (int i = 0; i < 100; ++i) text += std::to_string(i) + ",1\n";
  const std::string path = write_file(dir, "t.csv", text);
  StreamingCsv table({path}, {});
  table.select_share(0, 1);
  ASSERT_EQ(::truncate(path.c_str(), static_cast<off_t>(text.size() / 2)), 0);
  EXPECT_THROW(table.get_batch({99}), IoError);
  write_file(dir, "t.csv", text.substr(0, 8) + std::string(text.size() - 8, '\n'));  // the same size, no rows
  EXPECT_THROW(table.get_batch({40}), IoError);
}

TEST(PaddedRandomSampler, AShareInAFreshOrderEachEpochPaddedFromItsStart) {
  PaddedRandomSampler sampler(5, 7, 3);
  const std::vector<int64_t> e0 = sampler.indices(0), e1 = sampler.indices(1);
  ASSERT_EQ(e0.size(), 7u);
  EXPECT_EQ(std::set<int64_t>(e0.begin(), e0.begin() + 5), (std::set<int64_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(e0[5], e0[0]);
  EXPECT_EQ(e0[6], e0[1]);
  EXPECT_NE(e0, e1);
  EXPECT_EQ(e0, PaddedRandomSampler(5, 7, 3).indices(0));
  EXPECT_TRUE(PaddedRandomSampler(0, 0, 1).indices(0).empty());
  EXPECT_THROW(PaddedRandomSampler(0, 3, 1), ValueError);
}

}  // namespace
}  // namespace tessera::data
