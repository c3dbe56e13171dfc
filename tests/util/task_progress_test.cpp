// TaskProgress: what a long command prints while it works, checked on stderr as a log (a line per
// tenth) and as a terminal (a bar redrawn in place).
#include "tessera/util/task_progress.h"

#include <gtest/gtest.h>

namespace tessera {
namespace {

int count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST(TaskProgress, ALogGetsALinePerTenthOfTheWork) {
  ::testing::internal::CaptureStderr();
  {
    TaskProgress progress("eval", 40, /*interactive=*/false);
    for (int i = 0; i < 40; ++i) progress.advance();
  }
  const std::string out = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(count(out, "\n"), 10) << out;
  EXPECT_NE(out.find("eval: 4/40 done, "), std::string::npos) << out;
  EXPECT_NE(out.find("eval: 40/40 done, "), std::string::npos) << out;
  EXPECT_EQ(out.find('\r'), std::string::npos) << out;
}

TEST(TaskProgress, ATerminalGetsABarRedrawnInPlaceAndOneNewlineAtTheEnd) {
  ::testing::internal::CaptureStderr();
  {
    TaskProgress progress("bench", 4, /*interactive=*/true);
    for (int i = 0; i < 4; ++i) progress.advance();
  }
  const std::string out = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(count(out, "\r"), 4) << out;
  EXPECT_EQ(count(out, "\n"), 1) << out;
  EXPECT_NE(out.find("bench [###############...............] 2/4"), std::string::npos) << out;
  EXPECT_NE(out.find("bench [##############################] 4/4  0:00 left"), std::string::npos) << out;
}

TEST(TaskProgress, AnUnknownTotalCountsWithoutABar) {
  ::testing::internal::CaptureStderr();
  {
    TaskProgress progress("measuring", 0, /*interactive=*/false);
    progress.advance();
    progress.advance();
  }
  const std::string out = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(out.find("measuring: 2 done, "), std::string::npos) << out;
  EXPECT_EQ(TaskProgress::format_seconds(3725), "1:02:05");
  EXPECT_EQ(TaskProgress::format_seconds(65), "1:05");
  EXPECT_EQ(TaskProgress::format_seconds(-1), "0:00");
}

}  // namespace
}  // namespace tessera
