// Process memory facts, for stats and benchmarks.
#pragma once

#include <cstddef>

namespace kiln {

size_t peak_rss_bytes();     // high-water mark of resident memory (getrusage)
size_t current_rss_bytes();  // resident memory now (/proc/self/statm)

}  // namespace kiln
