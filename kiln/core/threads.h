// Threading: kiln uses one OpenMP runtime for its own kernels and for oneDNN, so the two share a
// pool and never oversubscribe the cores (see ../shared/MACHINE.md: a second pool is 2-5x slower).
#pragma once

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>

namespace kiln {

int num_threads();

// Runs fn(begin, end) over [0, n) split into contiguous chunks, one per thread. Blocks until done.
// fn must be safe to call concurrently on disjoint ranges.
template <typename Fn>
void parallel_for(int64_t n, Fn&& fn, int64_t min_chunk = 1) {
  if (n <= 0) return;
  int threads = num_threads();
  if (threads <= 1 || n <= min_chunk) {
    fn(int64_t(0), n);
    return;
  }
#pragma omp parallel num_threads(threads)
  {
    int t = omp_get_thread_num(), nt = omp_get_num_threads();
    int64_t chunk = (n + nt - 1) / nt;
    int64_t b = t * chunk, e = b + chunk < n ? b + chunk : n;
    if (b < e) fn(b, e);
  }
}

// Like parallel_for, for memory-bound streams whose threads do not run at the same speed (on this VM
// one core often streams 15-25 % slower than the other, or wakes late): each thread starts on its
// own contiguous share of [0, n) and takes `grain` items at a time from its front, so it reads
// sequentially; a thread whose share is done takes grains from the back of the others' shares.
// fn(begin, end) gets ranges of at most `grain` items.
template <typename Fn>
void parallel_for_stealing(int64_t n, int64_t grain, Fn&& fn, int64_t min_chunk = 1) {
  if (n <= 0) return;
  int threads = num_threads();
  if (threads <= 1 || n <= min_chunk) {
    fn(int64_t(0), n);
    return;
  }
  // A share's unclaimed items [front, back), packed in one word so both ends move by one CAS.
  struct alignas(64) Share {
    std::atomic<uint64_t> front_back;
  };
  const int64_t grains = (n + grain - 1) / grain;
  auto shares = std::make_unique<Share[]>(size_t(threads));
  for (int t = 0; t < threads; ++t) {
    const uint64_t front = uint64_t(grains * t / threads), back = uint64_t(grains * (t + 1) / threads);
    shares[t].front_back.store(front << 32 | back, std::memory_order_relaxed);
  }
  // Claims one grain from the front (owner) or the back (thief) of a share; -1 when it is empty.
  auto claim = [](Share& s, bool from_front) -> int64_t {
    uint64_t v = s.front_back.load(std::memory_order_relaxed);
    for (;;) {
      const uint64_t front = v >> 32, back = v & 0xffffffffu;
      if (front >= back) return -1;
      const uint64_t next = from_front ? (front + 1) << 32 | back : front << 32 | (back - 1);
      if (s.front_back.compare_exchange_weak(v, next, std::memory_order_relaxed))
        return int64_t(from_front ? front : back - 1);
    }
  };
#pragma omp parallel num_threads(threads)
  {
    // Every share is visited, even if the runtime gave fewer threads than asked for.
    const int t = omp_get_thread_num();
    auto run = [&](int64_t g) { fn(g * grain, std::min(n, (g + 1) * grain)); };
    for (int64_t g; (g = claim(shares[t], true)) >= 0;) run(g);
    for (int other = 1; other < threads; ++other)
      for (int64_t g; (g = claim(shares[(t + other) % threads], false)) >= 0;) run(g);
  }
}

}  // namespace kiln
