#include "kiln/core/threads.h"

#include <algorithm>
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

// One wait step: pause, and let the OS run something else now and then, in case the thread being
// waited for shares this core (ctest runs two test processes on two cores).
inline void spin_wait(uint32_t& spins) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
  if (++spins % 4096 == 0) std::this_thread::yield();
}

// A thread's progress through the team's current read-ahead range (read_ahead_seq, even).
struct ReadAheadCursor {
  uint64_t seq = 0;
  const char* next = nullptr;
  const char* end = nullptr;
};
thread_local ReadAheadCursor read_ahead_cursor;

// Reads the next KiB of thread t's read-ahead range, one load per line; false when there is
// nothing (left) to read. Loads rather than prefetch instructions: on the Zen 5 one core read 29-31
// GB/s with loads, 19-26 with prefetcht0/1/2 (docs/notes/cpu-attention.md, item 14).
bool read_ahead_step(SpinTeam& team, int t, ReadAheadCursor& c) {
  const uint64_t seq = team.read_ahead_seq.load(std::memory_order_acquire);
  if (seq % 2) return false;  // being rewritten
  if (seq != c.seq) {
    const char* base = team.read_ahead_base.load(std::memory_order_relaxed);
    const int64_t units = team.read_ahead_units.load(std::memory_order_relaxed);
    const int64_t unit_bytes = team.read_ahead_unit_bytes.load(std::memory_order_relaxed);
    const int64_t bytes = team.read_ahead_bytes.load(std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_acquire);
    if (team.read_ahead_seq.load(std::memory_order_relaxed) != seq) return false;
    c.seq = seq;
    c.next = c.end = base;
    if (base) {  // thread t's share, as parallel_for_stealing deals them
      const int64_t first = units * t / team.nt, last = units * (t + 1) / team.nt;
      c.next = base + first * unit_bytes;
      c.end = c.next + std::min(bytes, (last - first) * unit_bytes);
    }
  }
  if (c.next >= c.end) return false;
  constexpr int64_t kStep = 1024;  // between two looks at whether work has come
  uint64_t sink = 0;
  for (int64_t off = 0; off < kStep && c.next + off < c.end; off += 64)
    sink += *reinterpret_cast<const volatile uint8_t*>(c.next + off);
  c.next += kStep;
  asm volatile("" : : "r"(sink));
  return true;
}

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
    if (!read_ahead_step(team, 0, read_ahead_cursor)) spin_wait(spins);
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
      if (!read_ahead_step(team, t, read_ahead_cursor)) spin_wait(spins);
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

void read_ahead_for_next_loop(const void* base, int64_t units, int64_t unit_bytes,
                              int64_t bytes) {
  detail::SpinTeam* team = detail::current_team();
  if (!team || detail::in_team_job()) return;
  // Numbers unique in the process: a thread's cursor may be left from an earlier team, whose
  // memory may be gone.
  static std::atomic<uint64_t> last_seq{0};
  const uint64_t seq = last_seq.fetch_add(2, std::memory_order_relaxed) + 2;
  team->read_ahead_seq.store(seq + 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  team->read_ahead_base.store(static_cast<const char*>(base), std::memory_order_relaxed);
  team->read_ahead_units.store(units, std::memory_order_relaxed);
  team->read_ahead_unit_bytes.store(unit_bytes, std::memory_order_relaxed);
  team->read_ahead_bytes.store(bytes, std::memory_order_relaxed);
  team->read_ahead_seq.store(seq + 2, std::memory_order_release);
}

}  // namespace kiln
