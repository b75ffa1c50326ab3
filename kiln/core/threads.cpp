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

// One wait step: pause, and let the OS run something else now and then, in case the thread being
// waited for shares this core (ctest runs two test processes on two cores).
inline void spin_wait(uint32_t& spins) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
  if (++spins % 4096 == 0) std::this_thread::yield();
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
  while (team.done.load(std::memory_order_acquire) < team.nt - 1) spin_wait(spins);
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
      spin_wait(spins);
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

}  // namespace kiln
