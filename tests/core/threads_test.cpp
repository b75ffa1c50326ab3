#include "kiln/core/threads.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <vector>

namespace kiln {
namespace {

// Every index is run exactly once, in ranges of at most `grain`, whatever the split and stealing.
TEST(ParallelForStealing, RunsEveryIndexOnce) {
  for (int64_t n : {1, 2, 3, 7, 64, 1000, 2375}) {
    for (int64_t grain : {1, 3, 64}) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      std::atomic<bool> oversized{false};
      parallel_for_stealing(n, grain, [&](int64_t b, int64_t e) {
        if (e - b > grain || b >= e) oversized = true;
        for (int64_t i = b; i < e; ++i) hits[size_t(i)].fetch_add(1);
      });
      EXPECT_FALSE(oversized) << "n " << n << " grain " << grain;
      for (int64_t i = 0; i < n; ++i)
        ASSERT_EQ(hits[size_t(i)].load(), 1) << "n " << n << " grain " << grain << " index " << i;
    }
  }
}

// A slow thread's share is finished by the others (the point of stealing): with one index made
// slow, the total still covers everything, and some thread ran ranges outside its own share.
TEST(ParallelForStealing, OthersTakeOverASlowThreadsShare) {
  if (num_threads() < 2) GTEST_SKIP() << "needs two threads";
  const int64_t n = 64;
  std::vector<int> owner(static_cast<size_t>(n), -1);
  parallel_for_stealing(n, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      owner[size_t(i)] = omp_get_thread_num();
      // Thread 0 is slow: by the time it finishes its first item the others have stolen its rest.
      if (omp_get_thread_num() == 0) {
        const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(20);
        while (std::chrono::steady_clock::now() < until) {
        }
      }
    }
  });
  int by_thread0 = 0;
  for (int o : owner) {
    ASSERT_GE(o, 0);
    by_thread0 += o == 0;
  }
  EXPECT_LT(by_thread0, n / num_threads());
}

TEST(ParallelForStealing, SmallRangesRunInline) {
  int calls = 0;
  parallel_for_stealing(5, 1, [&](int64_t b, int64_t e) {
    ++calls;
    EXPECT_EQ(b, 0);
    EXPECT_EQ(e, 5);
  }, /*min_chunk=*/8);
  EXPECT_EQ(calls, 1);
}

}  // namespace
}  // namespace kiln
