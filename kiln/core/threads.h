// Threading: kiln uses one OpenMP runtime for its own kernels and for oneDNN, so the two share a
// pool and never oversubscribe the cores (see ../shared/MACHINE.md: a second pool is 2-5x slower).
#pragma once

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <exception>
#include <memory>

namespace kiln {

int num_threads();

namespace detail {

// The state of run_with_spinning_team (below): thread 0 posts a job by bumping `seq`; the others
// spin on it, run their share and count themselves in `done`.
struct SpinTeam {
  std::atomic<uint64_t> seq{0};
  std::atomic<int> done{0};
  std::atomic<bool> stop{false};
  std::atomic<bool> failed{false};  // a helper's exception is in `error`
  void (*invoke)(void* ctx, int t, int nt) = nullptr;
  void* ctx = nullptr;
  int nt = 1;
  std::exception_ptr error;
  // What waiting threads read ahead (read_ahead_for_next_loop), published seqlock-style:
  // read_ahead_seq is odd while thread 0 rewrites the fields.
  std::atomic<uint64_t> read_ahead_seq{0};
  std::atomic<const char*> read_ahead_base{nullptr};
  std::atomic<int64_t> read_ahead_units{0}, read_ahead_unit_bytes{0}, read_ahead_bytes{0};
};

SpinTeam*& current_team();  // set on the thread running a team's body, else null
bool& in_team_job();        // this thread is running a share of a team job
void run_team_job(SpinTeam& team, void (*invoke)(void*, int, int), void* ctx);
void team_helper_loop(SpinTeam& team, int t);

template <typename Share>
void run_on_team(SpinTeam& team, Share& share) {
  run_team_job(team, [](void* c, int t, int nt) { (*static_cast<Share*>(c))(t, nt); }, &share);
}

}  // namespace detail

// Names memory that the spinning team's next loop over it will read, split as
// parallel_for_stealing deals `units` units of `unit_bytes` bytes: until that loop starts, each
// thread that waits (for work, or at the end of a loop for the others) reads up to `bytes` from
// the start of its share, so that the loop finds them in its cache. A decode step's threads
// otherwise wait with the memory idle; each linear names the next linear's weights
// (read_ahead_for_gemv). The memory must stay readable until the team's body returns. Only from
// the thread that runs the team's body; does nothing outside a spinning team.
void read_ahead_for_next_loop(const void* base, int64_t units, int64_t unit_bytes, int64_t bytes);

// Runs fn(begin, end) over [0, n) split into contiguous chunks, one per thread. Blocks until done.
// fn must be safe to call concurrently on disjoint ranges.
template <typename Fn>
void parallel_for(int64_t n, Fn&& fn, int64_t min_chunk = 1) {
  if (n <= 0) return;
  int threads = num_threads();
  if (threads <= 1 || n <= min_chunk || detail::in_team_job()) {
    fn(int64_t(0), n);
    return;
  }
  auto share = [&](int t, int nt) {
    int64_t chunk = (n + nt - 1) / nt;
    int64_t b = t * chunk, e = b + chunk < n ? b + chunk : n;
    if (b < e) fn(b, e);
  };
  if (detail::SpinTeam* team = detail::current_team()) return detail::run_on_team(*team, share);
#pragma omp parallel num_threads(threads)
  share(omp_get_thread_num(), omp_get_num_threads());
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
  if (threads <= 1 || n <= min_chunk || detail::in_team_job()) {
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
  auto work = [&](int t, int) {
    // Every share is visited, even if the runtime gave fewer threads than asked for.
    auto run = [&](int64_t g) { fn(g * grain, std::min(n, (g + 1) * grain)); };
    for (int64_t g; (g = claim(shares[t], true)) >= 0;) run(g);
    for (int other = 1; other < threads; ++other)
      for (int64_t g; (g = claim(shares[(t + other) % threads], false)) >= 0;) run(g);
  };
  if (detail::SpinTeam* team = detail::current_team()) return detail::run_on_team(*team, work);
#pragma omp parallel num_threads(threads)
  work(omp_get_thread_num(), omp_get_num_threads());
}

// Runs body() on this thread while the other threads of one OpenMP region spin, waiting for the
// loops body() starts: every parallel_for / parallel_for_stealing inside it is handed to them as a
// job (~0.3 us) instead of opening a parallel region (~3.3 us here: libgomp's fork and join each
// make a futex syscall). For a run of many short loops that call nothing else parallel, such as a
// decode step; a oneDNN call inside would run on one thread. Loops nested in a job run serially,
// as nested parallel regions do. Exceptions from body() or any job reach the caller.
template <typename Body>
void run_with_spinning_team(Body&& body) {
  const int threads = num_threads();
  if (threads <= 1 || omp_in_parallel()) {  // inside a team (or any region) already
    body();
    return;
  }
  detail::SpinTeam team;
  std::exception_ptr error;
#pragma omp parallel num_threads(threads)
  {
    if (omp_get_thread_num() == 0) {
      team.nt = omp_get_num_threads();
      detail::current_team() = team.nt > 1 ? &team : nullptr;
      try {
        body();
      } catch (...) {
        error = std::current_exception();
      }
      detail::current_team() = nullptr;
      team.stop.store(true, std::memory_order_release);
    } else {
      detail::team_helper_loop(team, omp_get_thread_num());
    }
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace kiln
