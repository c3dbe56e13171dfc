// What a process group says of one collective call: its op, its signature (what the ranks must agree
// on: op, dtype, sizes, root) and the user's call site. The queue, the flight recorder, the Work
// handle and the watchdog all share one immutable CallText, and a group builds each distinct call's
// text once (ProcessGroup::intern_call): a training loop issues the same few calls again and again.
// Why: a 4 KiB all-reduce of 2 processes over shm takes 1.0 us in the backend alone (DISABLED_ShmTiming
// in tests/dist/backends), but 2.3-2.8 us through the group while every call formatted, copied and
// freed these strings (about 10 allocations; `perf record` of `tessera bench comm --min-bytes 4096
// --max-bytes 4096`: malloc/free 9%, string building 5%, clock reads 9%).
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

namespace tessera::dist {

struct CallText {
  std::string op;         // "allreduce"
  std::string signature;  // "allreduce (sum, float32 x 10)"
  std::string call_site;  // "parallel/ddp/reducer.cpp:120"; "an unknown place" when not given
  bool numbered = true;   // a collective (has a sequence number); new_group's split is not

  // "allreduce #3 (sum, float32 x 10)"; the signature alone when not numbered.
  std::string description(uint64_t sequence) const;
};
using CallTextPtr = std::shared_ptr<const CallText>;

namespace detail {

// What a call's text depends on, compared without building it: the op (a string literal), up to
// four numbers (reduce op, dtype, count, root, as the op uses them), a counts vector, the call site.
struct CallKey {
  const char* op = "";
  std::array<int64_t, 4> numbers{};
  std::span<const int64_t> counts;
  const char* file = nullptr;  // std::source_location's, or null when unknown
  uint32_t line = 0;
};

// A reference to a callable returning the details text ("sum, float32 x 10"), called only when the
// call's text is not interned yet. Neither owns nor copies the callable (no allocation).
class DetailsText {
 public:
  template <class F>
  DetailsText(const F& f)  // NOLINT: implicit, so that a lambda can be passed directly
      : callable_(&f), call_([](const void* c) { return (*static_cast<const F*>(c))(); }) {}
  std::string operator()() const { return call_(callable_); }

 private:
  const void* callable_;
  std::string (*call_)(const void*);
};

}  // namespace detail
}  // namespace tessera::dist
