// Scheduling priority of one thread. Linux's nice value belongs to a thread, not to its process, so
// one thread of a rank can run above the others: a process group's collectives thread, whose peers
// wait on it, above the compute threads it shares the rank's cores with.
#pragma once

namespace tessera {

// Asks the kernel to run the calling thread `levels` nice levels above where it runs now (nice
// lowered by `levels`, at most to -20). Returns false, the thread unchanged, where the process may
// not raise priorities: that needs CAP_SYS_NICE, or an RLIMIT_NICE (`ulimit -e`) that allows it.
bool raise_this_thread_priority(int levels);

// The calling thread's nice value (-20..19).
int this_thread_nice();

}  // namespace tessera
