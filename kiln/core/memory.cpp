#include "kiln/core/memory.h"

#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <new>

namespace kiln {

size_t peak_rss_bytes() {
  struct rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return size_t(u.ru_maxrss) * 1024;  // Linux reports KiB
}

size_t current_rss_bytes() {
  std::ifstream f("/proc/self/statm");
  size_t pages = 0, resident = 0;
  f >> pages >> resident;
  return resident * size_t(sysconf(_SC_PAGESIZE));
}

namespace {

constexpr size_t kHugePage = size_t(2) << 20;

size_t round_to_pages(size_t bytes) {
  const size_t page = size_t(sysconf(_SC_PAGESIZE));
  return (std::max<size_t>(bytes, 1) + page - 1) / page * page;
}

}  // namespace

void* map_pages(size_t bytes) {
  const size_t len = round_to_pages(bytes);
  // Over-map by one huge page, then unmap the unaligned head and the tail.
  void* raw =
      mmap(nullptr, len + kHugePage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) throw std::bad_alloc();
  const auto base = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t aligned = (base + kHugePage - 1) / kHugePage * kHugePage;
  const uintptr_t end = base + len + kHugePage;
  if (aligned > base) munmap(raw, aligned - base);
  if (end > aligned + len) munmap(reinterpret_cast<void*>(aligned + len), end - aligned - len);
  if (len >= kHugePage)  // advisory: a failure only costs speed
    madvise(reinterpret_cast<void*>(aligned), len / kHugePage * kHugePage, MADV_HUGEPAGE);
  return reinterpret_cast<void*>(aligned);
}

void unmap_pages(void* ptr, size_t bytes) {
  if (ptr) munmap(ptr, round_to_pages(bytes));
}

}  // namespace kiln
