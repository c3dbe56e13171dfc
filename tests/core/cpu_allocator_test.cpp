// The memory budget (core/cpu_allocator.h): an allocation past it is refused with a message that
// says what was asked for, what is live, what the budget is and how to change it.
#include "tessera/core/cpu_allocator.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "tessera/core/error.h"
#include "tessera/core/tensor.h"
#include "testing/expect.h"
#include "testing/temp_dir.h"

namespace tessera {
namespace {

using tessera::testing::expect_error;

// Puts the budget back however the test ends, so later tests in this process are not limited.
struct BudgetGuard {
  size_t saved = cpu_allocator::memory_budget();
  ~BudgetGuard() { cpu_allocator::set_memory_budget(saved); }
};

TEST(MemoryBudget, AnAllocationPastTheBudgetIsRefusedWithTheBudgetNamed) {
  BudgetGuard guard;
  const size_t live = cpu_allocator::allocated_bytes();
  const size_t budget = live + (size_t{1} << 20);  // 1 MiB above what is live now
  cpu_allocator::set_memory_budget(budget);
  EXPECT_EQ(cpu_allocator::memory_budget(), budget);

  Tensor under = Tensor::empty({512, 256});  // 512 KiB: fits
  EXPECT_EQ(under.numel(), 512 * 256);
  const std::string budget_text = std::to_string(budget);
  expect_error<OutOfMemoryError>([] { Tensor::empty({1024, 256}); },  // 1 MiB more: does not
                                 {"[empty]", "float32", "[1024, 256]", "1048576 bytes", budget_text.c_str(),
                                  "TESSERA_MEMORY_BUDGET", "set_memory_budget"});
  // A refusal leaves the counters as they were, and the next allocation that fits still works.
  EXPECT_EQ(cpu_allocator::allocated_bytes(), live + (size_t{512} << 10));
  Tensor still_fits = Tensor::empty({256, 256});
  EXPECT_EQ(still_fits.numel(), 256 * 256);

  cpu_allocator::set_memory_budget(0);  // no budget again
  Tensor big = Tensor::empty({1024, 1024});  // 4 MiB
  EXPECT_EQ(big.numel(), 1024 * 1024);
}

TEST(MemoryBudget, ItIsAnErrorTheCallerCanCatchByType) {
  BudgetGuard guard;
  cpu_allocator::set_memory_budget(cpu_allocator::allocated_bytes() + 4096);
  EXPECT_THROW(Tensor::empty({1 << 20}), OutOfMemoryError);
  EXPECT_THROW(Tensor::empty({1 << 20}), Error);
  // A size past the budget on its own is refused before it touches the counters (no overflow).
  EXPECT_THROW(cpu_allocator::allocate(~size_t{0} - 4096), OutOfMemoryError);
}

TEST(MemoryBudget, CachedFreeBlocksDoNotCount) {
  BudgetGuard guard;
  cpu_allocator::empty_cache();
  { Tensor freed = Tensor::empty({4 << 20});  /* 16 MiB, kept in the cache when freed */ }
  const size_t live = cpu_allocator::allocated_bytes();
  cpu_allocator::set_memory_budget(live + (size_t{2} << 20));
  Tensor fits = Tensor::empty({1 << 18});  // 1 MiB: the 16 MiB in the cache are not live
  EXPECT_EQ(cpu_allocator::allocated_bytes(), live + (size_t{1} << 20));
  cpu_allocator::empty_cache();
}

TEST(MemoryBudget, ParsesBytesWithKMGSuffixes) {
  EXPECT_EQ(cpu_allocator::parse_memory_budget("0"), 0u);
  EXPECT_EQ(cpu_allocator::parse_memory_budget("4096"), 4096u);
  EXPECT_EQ(cpu_allocator::parse_memory_budget("512K"), size_t{512} << 10);
  EXPECT_EQ(cpu_allocator::parse_memory_budget("64m"), size_t{64} << 20);
  EXPECT_EQ(cpu_allocator::parse_memory_budget("2G"), size_t{2} << 30);
  for (const char* bad : {"", "G", "1.5G", "-1", "12X", "12 G", "12GB", "99999999999999999999", "9999999999999999G"})
    expect_error<ValueError>([&] { cpu_allocator::parse_memory_budget(bad); }, {"[TESSERA_MEMORY_BUDGET]", "2G"});
}

TEST(MemoryBudget, TheEnvironmentSettingLimitsACommandLineRun) {
  const std::string dir = tessera::testing::fresh_dir("memory_budget", "env");
  // A 1024 x 1024 float32 matrix is 4 MiB, past a 1 MiB budget: refused, with exit code 1 (an Error).
  const std::string cmd = "TESSERA_MEMORY_BUDGET=1M " + std::string(TESSERA_BINARY) +
                          " bench matmul -n 1024 --threads-list 1 --repeats 1 > " + dir + "/out 2>&1";
  const int status = std::system(cmd.c_str());
  const std::string out = tessera::testing::read_text(dir + "/out");
  ASSERT_TRUE(WIFEXITED(status)) << out;
  EXPECT_EQ(WEXITSTATUS(status), 1) << out;
  EXPECT_NE(out.find("memory budget of 1048576 bytes"), std::string::npos) << out;
  EXPECT_NE(out.find("[1024, 1024]"), std::string::npos) << out;
}

}  // namespace
}  // namespace tessera
