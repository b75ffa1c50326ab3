#include "kiln/core/memory.h"

#include <sys/resource.h>
#include <unistd.h>

#include <fstream>

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

}  // namespace kiln
