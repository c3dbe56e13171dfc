// LinePrefixer: whole lines prefixed once, partial lines held until their newline or finish().
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <string>

#include "tessera/dist/launcher/line_prefixer.h"

using tessera::dist::launcher::LinePrefixer;

namespace {

// Feeds `chunks` through a prefixer writing into a temporary file (a pipe could fill up), and
// returns what came out.
std::string prefixed(std::initializer_list<std::string> chunks, bool finish) {
  std::FILE* file = std::tmpfile();
  EXPECT_NE(file, nullptr);
  int fd = ::fileno(file);
  {
    LinePrefixer p("[rank 3] ", fd);
    for (const auto& c : chunks) p.write(c.data(), c.size());
    if (finish) p.finish();
  }
  ::lseek(fd, 0, SEEK_SET);
  std::string out;
  char buffer[4096];
  ssize_t n;
  while ((n = ::read(fd, buffer, sizeof buffer)) > 0) out.append(buffer, static_cast<size_t>(n));
  std::fclose(file);
  return out;
}

}  // namespace

TEST(LinePrefixer, PrefixesEveryLine) {
  EXPECT_EQ(prefixed({"a\nb\n\n"}, false), "[rank 3] a\n[rank 3] b\n[rank 3] \n");
}

TEST(LinePrefixer, JoinsLinesSplitAcrossChunks) {
  EXPECT_EQ(prefixed({"hel", "lo\nwor", "ld\n"}, false), "[rank 3] hello\n[rank 3] world\n");
}

TEST(LinePrefixer, HoldsPartialLineUntilFinish) {
  EXPECT_EQ(prefixed({"done\nno newline"}, false), "[rank 3] done\n");
  EXPECT_EQ(prefixed({"done\nno newline"}, true), "[rank 3] done\n[rank 3] no newline\n");
  EXPECT_EQ(prefixed({}, true), "");
}

TEST(LinePrefixer, BoundsAnEndlessLine) {
  std::string big(LinePrefixer::kMaxLine, 'x');
  std::string out = prefixed({big, "y\n"}, false);
  EXPECT_EQ(out, "[rank 3] " + big + "\n[rank 3] y\n");
}
