// The always-on collective check (process_group.h): the watchdog thread publishes this rank's newest
// fingerprints (sequence number, call site, op with dtype, sizes and root) to the group's store and
// compares them with the next rank's. Comparing each rank with its neighbour suffices: if every pair
// (r, r+1) agrees on a number, all ranks do. The rank that finds a mismatch also publishes it, so every
// rank fails with the same message within about a second more.
//
// Store keys (under the group's prefix), the whole contract:
//   fingerprint/<rank>  lines "<sequence>\t<call site>\t<signature>\n", the newest kPublished calls
//   mismatch            the report of the first mismatch found
//   leaving/<rank>      this rank's group is being destroyed after the mismatch: its caller has had
//                       the report (a rank about to exit waits for every rank's, at most 3 s)
//
// Cost: at most one set and two reads of the store per rank per second, on the watchdog thread; the
// data path only records the call in the flight recorder, as it already did.
#include <cstdio>
#include <map>
#include <sstream>

#include "tessera/core/error.h"
#include "tessera/dist/process_group.h"

namespace tessera::dist {

using tessera::detail::concat;

namespace {

constexpr size_t kPublished = 64;  // ranks are never further apart than this: each collective waits for all
constexpr const char* kMismatchKey = "mismatch";

std::string fingerprint_key(int rank) { return concat("fingerprint/", rank); }

struct Fingerprint {
  std::string call_site;
  std::string signature;
};

std::map<uint64_t, Fingerprint> parse_fingerprints(const std::string& text) {
  std::map<uint64_t, Fingerprint> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    const size_t tab1 = line.find('\t');
    const size_t tab2 = tab1 == std::string::npos ? std::string::npos : line.find('\t', tab1 + 1);
    if (tab2 == std::string::npos) continue;  // not ours: ignored rather than trusted
    try {
      out[std::stoull(line.substr(0, tab1))] = {line.substr(tab1 + 1, tab2 - tab1 - 1), line.substr(tab2 + 1)};
    } catch (const std::exception&) {
    }
  }
  return out;
}

}  // namespace

void ProcessGroup::check_fingerprints(std::unique_lock<std::mutex>& lock) {
  if (!options_.collective_check || size_ < 2 || mismatched_) return;
  const uint64_t issued = next_sequence_.load();
  lock.unlock();
  std::string message;
  try {
    const std::vector<FlightEntry> mine = flight_.newest(kPublished);
    if (issued > 0 && issued - 1 != published_through_) {  // only the watchdog thread touches it
      std::string text;
      for (const auto& e : mine) text += concat(e.sequence, "\t", e.call->call_site, "\t", e.call->signature, "\n");
      store_->set(fingerprint_key(rank_), text);
      published_through_ = issued - 1;
    }
    const int next = (rank_ + 1) % size_;
    if (store_->check({kMismatchKey})) {
      message = store_->get_string(kMismatchKey);
    } else if (store_->check({fingerprint_key(next)})) {
      const auto theirs = parse_fingerprints(store_->get_string(fingerprint_key(next)));
      for (const auto& e : mine) {
        auto it = theirs.find(e.sequence);
        if (it == theirs.end() || it->second.signature == e.call->signature) continue;
        auto who = [&](int r) {
          const int global = global_ranks_[static_cast<size_t>(r)];
          return global == r ? concat("rank ", r) : concat("rank ", r, " (global rank ", global, ")");
        };
        message = concat("[collective check] collective #", e.sequence, " differs across ranks: ", who(rank_),
                         " called ", e.call->signature, " at ", e.call->call_site, ", ", who(next), " called ",
                         it->second.signature, " at ", it->second.call_site,
                         ". Every rank must call the same collectives in the same order, with the same sizes, dtype "
                         "and root (TESSERA_DIST_DEBUG=1 compares every call before it runs)");
        store_->set(kMismatchKey, message);
        break;
      }
    }
  } catch (const std::exception&) {
    // Best effort: a store that does not answer is the collectives' timeout to report.
  }
  lock.lock();
  if (!message.empty()) fail_mismatched(lock, message);
}

void ProcessGroup::fail_mismatched(std::unique_lock<std::mutex>& lock, const std::string& message) {
  if (mismatched_) return;
  mismatched_ = true;
  std::exception_ptr error = std::make_exception_ptr(ValueError(message));
  if (!broken_) {
    broken_ = error;
    broken_by_ = "the collective check";
  }
  WorkPtr stuck = in_flight_work_;
  lock.unlock();
  std::fprintf(stderr, "rank %d: %s\n", global_ranks_[static_cast<size_t>(rank_)], message.c_str());
  std::fflush(stderr);
  dump_flight_record(message);
  // The caller waiting in this collective gets the report now. An abortable backend (shm, tcp) leaves the
  // collective within a sleep slice, which also frees a caller that runs it on its own thread
  // (Work::wait); another stays inside until the timeout (or the destructor ends the process).
  if (stuck) stuck->finish(error);
  communicator_->abort();
  lock.lock();
}

void ProcessGroup::wait_for_ranks_leaving_after_mismatch() {
  std::vector<std::string> keys;
  for (int r = 0; r < size_; ++r) keys.push_back(concat("leaving/", r));
  try {
    store_->set(keys[static_cast<size_t>(rank_)], "1");
    // Each live rank's check sees the mismatch within about a second, and its caller then fails.
    store_->wait(keys, Milliseconds(3000));
  } catch (const std::exception&) {
    // A rank that is dead or stopped never reports; the launcher names it.
  }
}

}  // namespace tessera::dist
