// Helpers of the parameter-server tests: servers and workers as threads of the test process, over
// real loopback TCP. A server thread runs ParameterServer::run() and keeps its report or error.
#pragma once
#include <exception>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "tessera/parallel/ps/server.h"

namespace tessera::testing {

inline const std::string kPsTestToken = "ps-test-token";

struct ServerThreads {
  std::vector<std::unique_ptr<parallel::ps::ParameterServer>> servers;
  std::vector<parallel::ps::ServerReport> reports;
  std::vector<std::string> errors;
  std::vector<std::thread> threads;

  ServerThreads(int count, parallel::ps::ServerOptions options) : reports(count), errors(count) {
    for (int i = 0; i < count; ++i) {
      auto o = options;
      o.server_rank = i;
      o.num_servers = count;
      o.token = kPsTestToken;
      o.log = [](const std::string&) {};
      servers.push_back(std::make_unique<parallel::ps::ParameterServer>(o));
    }
    for (int i = 0; i < count; ++i)
      threads.emplace_back([this, i] {
        try {
          reports[i] = servers[i]->run();
        } catch (const std::exception& e) {
          errors[i] = e.what();
        }
      });
  }
  ~ServerThreads() {
    for (auto& s : servers) s->stop();
    join();
  }
  void join() {
    for (auto& t : threads)
      if (t.joinable()) t.join();
  }
  std::vector<std::string> addresses() const {
    std::vector<std::string> out;
    for (const auto& s : servers) out.push_back(s->address());
    return out;
  }
};

}  // namespace tessera::testing
