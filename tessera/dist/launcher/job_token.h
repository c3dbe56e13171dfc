// The job token: a shared secret that every rendezvous-store client presents, so a stray process
// (or another job on the same port) cannot join. 128 bits make guessing it hopeless.
#pragma once
#include <string>

namespace tessera::dist::launcher {

// 16 bytes from /dev/urandom as 32 lowercase hex digits; IoError if it cannot be read.
std::string random_job_token();

}  // namespace tessera::dist::launcher
