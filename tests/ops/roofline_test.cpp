// The machine probes behind `kiln bench`'s rooflines and phase readings (roofline.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "kiln/backends/cpu/kernels.h"
#include "kiln/core/error.h"

namespace kiln::cpu {
namespace {

// The best of a few tries: a timed lap of a small buffer is short enough for one interrupt to
// dominate it.
double best_latency(size_t bytes, bool from_memory) {
  double best = 1e300;
  for (int i = 0; i < 5; ++i) best = std::min(best, measure_load_latency(bytes, from_memory));
  return best;
}

TEST(Roofline, LoadLatencyOfAnL1BufferIsFarBelowMemory) {
  // 16 KiB fits every L1 data cache kiln runs on (a few cycles a load); memory takes tens of
  // nanoseconds or more anywhere.
  const double l1 = best_latency(size_t(16) << 10, false);
  const double memory = best_latency(size_t(64) << 20, true);
  EXPECT_GT(l1, 0);
  EXPECT_LT(4 * l1, memory) << "L1 " << l1 << " ns, memory " << memory << " ns";
}

TEST(Roofline, LoadLatencyRejectsBuffersTooSmallToChase) {
  EXPECT_THROW(measure_load_latency(64, false), InternalError);
  // From memory it spreads 64 Ki lines over the buffer: 4 MiB at least.
  EXPECT_THROW(measure_load_latency(size_t(1) << 20, true), InternalError);
}

TEST(Roofline, SumLinesReadsEveryLineOnceInEitherOrder) {
  // The bandwidth probe's read loop: one stream or two halves side by side, with each kind of
  // prefetch, must sum every line of the range exactly once, whatever its length (odd counts and
  // halves that are not a multiple of its 4-line step included).
  std::vector<uint64_t> storage(8 * 200 + 8);
  uint64_t* words = storage.data() + (8 - reinterpret_cast<uintptr_t>(storage.data()) / 8 % 8) % 8;
  for (size_t i = 0; i < 8 * 200; ++i) words[i] = i * 0x9E3779B97F4A7C15ull;
  for (int64_t lines : {0, 1, 2, 3, 4, 5, 7, 8, 9, 15, 17, 64, 129, 199}) {
    uint64_t expected = 0;
    for (int64_t i = 0; i < 8 * lines; ++i) expected += words[i];
    for (int streams : {1, 2})
      for (ReadPrefetch prefetch :
           {ReadPrefetch::kNone, ReadPrefetch::kEveryLine, ReadPrefetch::kPageKick})
        EXPECT_EQ(sum_lines(words, lines, prefetch, streams), expected)
            << lines << " lines, " << streams << " streams, prefetch " << int(prefetch);
  }
  EXPECT_THROW(sum_lines(words, 8, ReadPrefetch::kNone, 3), InternalError);  // a caller's bug
}

}  // namespace
}  // namespace kiln::cpu
