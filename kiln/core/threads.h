// Threading: kiln uses one OpenMP runtime for its own kernels and for oneDNN, so the two share a
// pool and never oversubscribe the cores (see ../shared/MACHINE.md: a second pool is 2-5x slower).
#pragma once

#include <omp.h>

#include <cstdint>

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

}  // namespace kiln
