// `tessera run` through the real binary: the flags that choose workers and servers, and what a
// parameter-server job prints and returns.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <sys/wait.h>

#include "dist/launcher/launch_testing.h"

using tessera::testing::read_text;
using tessera::testing::TempDir;

namespace {

struct CliRun {
  int exit_code = -1;
  std::string out, err;
};

// `tessera run ARGS` with stdout and stderr captured; ARGS is shell text.
CliRun tessera_run(const std::string& args, const TempDir& dir) {
  std::string out = (dir.path() / "out.txt").string(), err = (dir.path() / "err.txt").string();
  std::string command = std::string(TESSERA_BINARY) + " run " + args + " > " + out + " 2> " + err;
  int status = std::system(command.c_str());
  CliRun r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = read_text(out);
  r.err = read_text(err);
  return r;
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

constexpr const char* kPrintRole =
    " -- /bin/sh -c 'echo \"${TESSERA_ROLE-none} ${TESSERA_SERVER_RANK-none} ${RANK-none}\"'";

}  // namespace

TEST(LaunchCli, ServersAndWorkersStartAParameterServerJob) {
  TempDir dir;
  CliRun r = tessera_run(std::string("--servers 1 --workers 2") + kPrintRole, dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "[server 0] server 0 none\n")) << r.out;
  EXPECT_TRUE(contains(r.out, "[rank 0] worker none 0\n")) << r.out;
  EXPECT_TRUE(contains(r.out, "[rank 1] worker none 1\n")) << r.out;
}

TEST(LaunchCli, NprocPerNodeStillStartsAPlainJob) {
  TempDir dir;
  CliRun r = tessera_run(std::string("--nproc-per-node 2") + kPrintRole, dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "[rank 0] none none 0\n")) << r.out;
  EXPECT_TRUE(contains(r.out, "[rank 1] none none 1\n")) << r.out;
  // --servers also works with --nproc-per-node, its synonym.
  r = tessera_run(std::string("--servers 1 --nproc-per-node 1") + kPrintRole, dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "[server 0] server 0 none\n")) << r.out;
}

TEST(LaunchCli, FailedWorkerOfAParameterServerJobExitsZero) {
  TempDir dir;
  CliRun r = tessera_run("--servers 1 --workers 2 -- /bin/sh -c 'if [ \"$RANK\" = 1 ]; then exit 3; fi'", dir);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.err, "tessera run: worker rank 1 (pid ")) << r.err;
  EXPECT_TRUE(contains(r.err, ") exited with status 3; a parameter-server job goes on without it\n")) << r.err;
}

TEST(LaunchCli, FailedServerFailsTheJob) {
  TempDir dir;
  CliRun r = tessera_run("--servers 1 --workers 1 -- /bin/sh -c 'if [ \"$TESSERA_ROLE\" = server ]; then exit 5; fi'",
                         dir);
  EXPECT_EQ(r.exit_code, 5) << r.err;
  EXPECT_TRUE(contains(r.err, "tessera run: server 0 (pid ")) << r.err;
  EXPECT_TRUE(contains(r.err, ") exited with status 5")) << r.err;
}

TEST(LaunchCli, NeedsExactlyOneWorkerCount) {
  TempDir dir;
  CliRun neither = tessera_run("--servers 1 -- true", dir);
  EXPECT_NE(neither.exit_code, 0);
  EXPECT_TRUE(contains(neither.err, "--workers (or its synonym --nproc-per-node) is required")) << neither.err;
  CliRun both = tessera_run("--workers 1 --nproc-per-node 1 -- true", dir);
  EXPECT_NE(both.exit_code, 0);
  EXPECT_TRUE(contains(both.err, "excludes")) << both.err;
  CliRun no_servers = tessera_run("--servers 0 --workers 1 -- true", dir);
  EXPECT_NE(no_servers.exit_code, 0);
  EXPECT_TRUE(contains(no_servers.err, "--servers")) << no_servers.err;
}
