// The launcher hosts the rendezvous store on node 0 at MASTER_ADDR:MASTER_PORT for as long as the
// job runs, and it accepts the job token.
#include <gtest/gtest.h>

#include <fstream>
#include <future>

#include "dist/launcher/launch_testing.h"
#include "tessera/dist/store/tcp_store.h"
#include "testing/listen_port.h"

using namespace tessera;
using namespace tessera::dist::launcher;
using tessera::testing::launch_captured;
using tessera::testing::sh_job;
using tessera::testing::TempDir;

namespace {

// Creates `path` when destroyed, so the workers waiting for it finish on every path out of the test.
struct TouchOnExit {
  std::filesystem::path path;
  ~TouchOnExit() { std::ofstream{path}; }
};

}  // namespace

TEST(Launch, HostsTheRendezvousStore) {
  TempDir dir;
  std::string done = (dir.path() / "done").string();
  // The workers stay up until the test is done with the store (at most ~10 s, and the job's
  // timeout bounds even that).
  LaunchOptions o = sh_job(2, "i=0; while [ ! -e " + done + " ] && [ $i -lt 1000 ]; do sleep 0.01; i=$((i+1)); done");
  o.master_port = tessera::testing::free_listen_port();  // the launcher must bind it
  o.job_token = "launcher-test-token";
  o.timeout = std::chrono::seconds(30);
  auto job = std::async(std::launch::async, [&] { return launch_captured(o, dir); });
  {
    TouchOnExit release{done};
    dist::TcpStoreOptions client;
    client.host = "127.0.0.1";
    client.port = static_cast<uint16_t>(o.master_port);
    client.token = o.job_token;
    client.timeout = std::chrono::seconds(10);
    client.connect_timeout = std::chrono::seconds(10);  // retries until launch() has started the server
    dist::TcpStore store(client);
    store.set("greeting", "hello");
    EXPECT_EQ(store.get_string("greeting"), "hello");
  }
  auto c = job.get();
  EXPECT_EQ(c.result.exit_code, 0) << c.result.message << c.err;
}
