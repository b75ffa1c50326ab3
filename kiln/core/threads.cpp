#include "kiln/core/threads.h"

#include <thread>

namespace kiln {

int num_threads() { return omp_get_max_threads(); }

namespace detail {

SpinTeam*& current_team() {
  thread_local SpinTeam* team = nullptr;
  return team;
}

bool& in_team_job() {
  thread_local bool in_job = false;
  return in_job;
}

namespace {

// Where this thread is in its read-ahead range (set_team_read_ahead).
struct ReadAheadCursor {
  uint64_t seq = 0;
  size_t done = 0;
};

// Prefetches the next lines of thread t's read-ahead range; false when there is nothing left.
bool read_ahead_step(SpinTeam& team, int t, ReadAheadCursor& cursor) {
  if (t >= SpinTeam::kMaxReadAhead) return false;
  const uint64_t seq = team.ahead_seq.load(std::memory_order_acquire);
  if (seq != cursor.seq) cursor = {seq, 0};
  const size_t bytes = team.ahead_bytes[t].load(std::memory_order_relaxed);
  if (cursor.done >= bytes) return false;
  const char* p = team.ahead_begin[t].load(std::memory_order_relaxed) + cursor.done;
  // 8 lines a step: enough to keep the core's misses in flight, few enough that a new job is
  // seen within ~0.1 us.
  constexpr size_t kStep = 8 * 64;
#if defined(__x86_64__) || defined(__i386__)
  for (size_t i = 0; i < kStep; i += 64) __builtin_prefetch(p + i, 0, 2);
#endif
  cursor.done += kStep;
  return true;
}

// One wait step: read ahead, or pause, and let the OS run something else now and then, in case
// the thread being waited for shares this core (ctest runs two test processes on two cores).
inline void spin_wait(SpinTeam& team, int t, ReadAheadCursor& cursor, uint32_t& spins) {
  if (read_ahead_step(team, t, cursor)) return;
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
  if (++spins % 4096 == 0) std::this_thread::yield();
}

thread_local ReadAheadCursor tls_cursor;

}  // namespace

void run_team_job(SpinTeam& team, void (*invoke)(void*, int, int), void* ctx) {
  team.invoke = invoke;
  team.ctx = ctx;
  team.done.store(0, std::memory_order_relaxed);
  team.seq.fetch_add(1, std::memory_order_release);  // publishes invoke, ctx and done = 0
  std::exception_ptr mine;
  in_team_job() = true;
  try {
    invoke(ctx, 0, team.nt);
  } catch (...) {
    mine = std::current_exception();
  }
  in_team_job() = false;
  uint32_t spins = 0;
  while (team.done.load(std::memory_order_acquire) < team.nt - 1)
    spin_wait(team, 0, tls_cursor, spins);
  if (team.failed.load(std::memory_order_relaxed)) {
    std::exception_ptr theirs = team.error;
    team.error = nullptr;
    team.failed.store(false, std::memory_order_relaxed);
    if (!mine) mine = theirs;
  }
  if (mine) std::rethrow_exception(mine);
}

void team_helper_loop(SpinTeam& team, int t) {
  uint64_t seen = 0;
  for (;;) {
    uint64_t s;
    uint32_t spins = 0;
    while ((s = team.seq.load(std::memory_order_acquire)) == seen) {
      if (team.stop.load(std::memory_order_acquire)) return;
      spin_wait(team, t, tls_cursor, spins);
    }
    seen = s;
    in_team_job() = true;
    try {
      team.invoke(team.ctx, t, team.nt);
    } catch (...) {
      bool expected = false;  // the first helper to fail keeps its exception
      if (team.failed.compare_exchange_strong(expected, true)) team.error = std::current_exception();
    }
    in_team_job() = false;
    team.done.fetch_add(1, std::memory_order_release);
  }
}

}  // namespace detail

void set_team_read_ahead(const ReadAhead* ranges, int n) {
  detail::SpinTeam* team = detail::current_team();
  if (!team) return;
  for (int t = 0; t < detail::SpinTeam::kMaxReadAhead; ++t) {
    const bool has = t < n && ranges && ranges[t].begin;
    team->ahead_begin[t].store(has ? static_cast<const char*>(ranges[t].begin) : nullptr,
                               std::memory_order_relaxed);
    team->ahead_bytes[t].store(has ? ranges[t].bytes : 0, std::memory_order_relaxed);
  }
  team->ahead_seq.fetch_add(1, std::memory_order_release);
}

}  // namespace kiln
