// TESSERA_DIST_DEBUG's check (ProcessGroupOptions::debug): before each collective every rank
// publishes its call (op, dtype, sizes, root) in the group's store and compares it with the others',
// so a mismatch is a ValueError on every rank listing each rank's call, instead of a hang or a
// silently wrong result. Costs a store round trip per collective, hence off by default.
#include <algorithm>

#include "tessera/core/error.h"
#include "tessera/dist/process_group.h"

namespace tessera::dist {

using tessera::detail::concat;

void ProcessGroup::check_same_call(const Task& task, Deadline deadline) {
  auto key = [&](uint64_t sequence, int r) { return concat("debug/", sequence, "/", r); };
  store_->set(key(task.sequence, rank_), task.call->signature);
  std::vector<std::string> keys;
  for (int r = 0; r < size_; ++r) keys.push_back(key(task.sequence, r));
  auto left = std::chrono::ceil<Milliseconds>(deadline - detail::Clock::now());
  store_->wait(keys, std::max(left, Milliseconds(0)));
  std::vector<std::string> calls;
  for (const auto& k : keys) calls.push_back(store_->get_string(k));
  // Everyone has read the keys of #seq-1 before publishing #seq, so #seq-2's are no longer needed.
  if (task.sequence >= 2) store_->delete_key(key(task.sequence - 2, rank_));
  if (std::all_of(calls.begin(), calls.end(), [&](const std::string& c) { return c == calls[0]; })) return;
  std::string listing;
  for (int r = 0; r < size_; ++r) listing += concat("\n  rank ", r, ": ", calls[static_cast<size_t>(r)]);
  throw ValueError(concat("[TESSERA_DIST_DEBUG] collective #", task.sequence,
                          " differs across ranks (every rank must call the same collective with the same sizes,"
                          " dtype and root):",
                          listing));
}

}  // namespace tessera::dist
