#include "kiln/core/threads.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
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

// run_with_spinning_team: the loops inside run on the team's threads, every index once, many loops
// in a row (a decode step has ~170), stealing included.
TEST(SpinningTeam, LoopsInsideRunEveryIndexOnceOnAllThreads) {
  const int64_t n = 1000;
  std::vector<std::atomic<int>> hits(n);
  std::vector<std::atomic<int>> by_thread(64);
  int loops = 0;
  kiln::run_with_spinning_team([&] {
    for (int rep = 0; rep < 2000; ++rep, ++loops) {
      auto count = [&](int64_t b, int64_t e) {
        by_thread[size_t(omp_get_thread_num() % 64)] += 1;
        for (int64_t i = b; i < e; ++i) hits[size_t(i)] += 1;
      };
      if (rep % 2)
        kiln::parallel_for(n, count);
      else
        kiln::parallel_for_stealing(n, 7, count);
    }
  });
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[size_t(i)].load(), loops) << "index " << i;
  if (kiln::num_threads() > 1) {
    EXPECT_GT(by_thread[1].load(), 0) << "no loop reached a helper";
  }
}

// Reading ahead (what waiting threads do with a named range) changes no loop's work, inside a team
// or out of one (a no-op there), and a range may be named again before the last was read.
TEST(SpinningTeam, ReadingAheadLeavesLoopsAlone) {
  std::vector<char> next(size_t(4) << 20, 1);
  kiln::read_ahead_for_next_loop(next.data(), 64, 64 << 10, 1 << 20);
  const int64_t n = 512;
  std::vector<std::atomic<int>> hits(n);
  kiln::run_with_spinning_team([&] {
    for (int rep = 0; rep < 200; ++rep) {
      kiln::read_ahead_for_next_loop(next.data() + (rep % 2) * (1 << 20), 48, 64 << 10,
                                     (rep % 3) << 20);
      kiln::parallel_for_stealing(n, 1, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) hits[size_t(i)] += 1;
      });
    }
    kiln::read_ahead_for_next_loop(nullptr, 0, 0, 0);
  });
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[size_t(i)].load(), 200) << "index " << i;
}

TEST(SpinningTeam, NestedLoopsAndTeamsRunSeriallyInPlace) {
  std::atomic<int> inner_regions{0}, outer{0};
  kiln::run_with_spinning_team([&] {
    kiln::run_with_spinning_team([&] { ++outer; });  // nested team: body runs directly
    kiln::parallel_for(4, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        const int t = omp_get_thread_num();
        kiln::parallel_for(100, [&](int64_t, int64_t) {
          EXPECT_EQ(omp_get_thread_num(), t);  // a nested loop stays on its thread, whole
          ++inner_regions;
        });
      }
    });
  });
  EXPECT_EQ(outer.load(), 1);
  EXPECT_EQ(inner_regions.load(), 4);
}

// An exception on a helper's share, or in the body, reaches the caller; the team shuts down and
// the next one works.
TEST(SpinningTeam, ExceptionsReachTheCaller) {
  if (kiln::num_threads() < 2) GTEST_SKIP() << "needs two threads";
  EXPECT_THROW(kiln::run_with_spinning_team([&] {
                 kiln::parallel_for(2, [&](int64_t b, int64_t) {
                   if (b == 1) throw std::runtime_error("share 1");
                 });
               }),
               std::runtime_error);
  EXPECT_THROW(kiln::run_with_spinning_team([&] {
                 kiln::parallel_for(2, [](int64_t, int64_t) {});
                 throw std::logic_error("body");
               }),
               std::logic_error);
  std::atomic<int64_t> sum{0};
  kiln::run_with_spinning_team([&] {
    try {
      kiln::parallel_for_stealing(64, 1, [&](int64_t b, int64_t) {
        if (b == 63) throw std::runtime_error("last grain");
      });
    } catch (const std::runtime_error&) {
      sum += 1000;  // caught inside: the team goes on
    }
    kiln::parallel_for(100, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) sum += i;
    });
  });
  EXPECT_EQ(sum.load(), 1000 + 4950);
}
