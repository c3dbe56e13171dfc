// CSV tables (data/csv.h): values, the label by name, partitions, and every malformed input refused
// naming the file, the line and the column.
#include <gtest/gtest.h>

#include <fstream>

#include "tessera/core/error.h"
#include "tessera/data/csv.h"
#include "testing/temp_dir.h"

namespace tessera::data {
namespace {

std::string file(const std::string& dir, const std::string& name, const std::string& text) {
  std::ofstream(dir + "/" + name) << text;
  return dir + "/" + name;
}

void expect_refused(const std::vector<std::string>& paths, const std::string& expected, CsvOptions o = {}) {
  try {
    load_csv(paths, o);
    ADD_FAILURE() << "loaded; expected an error with: " << expected;
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
  }
}

TEST(Csv, TheLabelColumnByNameAndTheRestAsFeatures) {
  const std::string dir = tessera::testing::fresh_dir("csv", "basic");
  const std::string a = file(dir, "a.csv", "x, y ,label,z\n1,2,0,3\n\n4.5,-1e2,2,6\n");
  const std::string b = file(dir, "b.csv", "x, y ,label,z\r\n7,8,1,9\r\n");
  CsvTable t = load_csv({a, b});
  EXPECT_EQ(t.feature_columns, (std::vector<std::string>{"x", "y", "z"}));
  EXPECT_EQ(t.classes, 3);
  EXPECT_EQ(t.data->inputs().to_vector<float>(), (std::vector<float>{1, 2, 3, 4.5f, -100, 6, 7, 8, 9}));
  EXPECT_EQ(t.data->targets().to_vector<int64_t>(), (std::vector<int64_t>{0, 2, 1}));
  CsvOptions regression;
  regression.label = "z";
  regression.regression = true;
  CsvTable r = load_csv({a}, regression);
  EXPECT_EQ(r.data->targets().shape(), (Shape{2, 1}));
  EXPECT_EQ(r.data->targets().to_vector<float>(), (std::vector<float>{3, 6}));
  CsvOptions no_header;
  no_header.header = false;
  no_header.label = "0";
  EXPECT_EQ(load_csv({file(dir, "c.csv", "1,0.5\n0,0.25\n")}, no_header).data->inputs().to_vector<float>(),
            (std::vector<float>{0.5f, 0.25f}));
}

TEST(Csv, MissingAndMalformedValuesNameFileLineAndColumn) {
  const std::string dir = tessera::testing::fresh_dir("csv", "bad");
  expect_refused({file(dir, "missing.csv", "x,label\n1,0\n,1\n")}, "missing.csv:3: column \"x\" holds \"\"");
  expect_refused({file(dir, "na.csv", "x,label\n1,0\nNA,1\n")}, "na.csv:3: column \"x\" holds \"NA\", not a number");
  expect_refused({file(dir, "nan.csv", "x,label\nnan,0\n")}, "column \"x\" holds \"nan\"");
  expect_refused({file(dir, "text.csv", "x,label\n1.5abc,0\n")}, "text.csv:2: column \"x\" holds \"1.5abc\"");
  expect_refused({file(dir, "fields.csv", "x,label\n1,0,5\n")}, "fields.csv:2: 3 fields, the header has 2");
  expect_refused({file(dir, "signs.csv", "x,label\n+-5,0\n")}, "signs.csv:2: column \"x\" holds \"+-5\"");
  expect_refused({file(dir, "range.csv", "x,label\n1e39,0\n")}, "range.csv:2: column \"x\" holds 1e39, past float32's range");
  expect_refused({file(dir, "label.csv", "x,label\n1,0.5\n")}, "label 0.5 is not a class id");
  expect_refused({file(dir, "nolabel.csv", "x,y\n1,0\n")}, "no label column \"label\"");
  expect_refused({file(dir, "quote.csv", "x,label\n\"1\",0\n")}, "quoted fields are not supported");
  expect_refused({file(dir, "empty.csv", "x,label\n")}, "hold no rows");
  expect_refused({file(dir, "one.csv", "x,label\n1,0\n"), file(dir, "two.csv", "y,label\n1,0\n")},
                 "two.csv:1: its columns differ from");
  EXPECT_THROW(load_csv({dir + "/absent.csv"}), IoError);
}

TEST(Csv, PartitionsAreFilesDealtToRanks) {
  const std::string dir = tessera::testing::fresh_dir("csv", "parts");
  for (const char* name : {"p2.csv", "p0.csv", "p1.csv", "notes.txt"}) file(dir, name, "x,label\n1,0\n");
  const std::vector<std::string> all = csv_files(dir);
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all[0], dir + "/p0.csv");
  EXPECT_EQ(csv_partition_of(all, 1, 2), (std::vector<std::string>{dir + "/p1.csv"}));
  EXPECT_EQ(csv_partition_of(all, 0, 2), (std::vector<std::string>{dir + "/p0.csv", dir + "/p2.csv"}));
  EXPECT_THROW(csv_partition_of(all, 0, 4), ValueError);
  EXPECT_THROW(csv_files(dir + "/nothing"), IoError);
}

}  // namespace
}  // namespace tessera::data
