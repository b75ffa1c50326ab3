// Process memory facts, for stats and benchmarks.
#pragma once

#include <cstddef>

namespace kiln {

size_t peak_rss_bytes();     // high-water mark of resident memory (getrusage)
size_t current_rss_bytes();  // resident memory now (/proc/self/statm)

// Large buffers (packed weights, arenas, big tensors) come straight from the kernel rather than
// from malloc: glibc keeps freed blocks above its (self-raising) mmap threshold in its heap, so the
// temporaries of weight packing stayed resident (~10 MB per layer). The mapping is 2 MiB aligned
// and its whole 2 MiB pages are advised for transparent huge pages (first-touching 4 KiB pages is
// slow on these VMs); the tail stays in 4 KiB pages so rounding wastes no resident memory.
// Fresh pages are zero. Throws std::bad_alloc.
void* map_pages(size_t bytes);
void unmap_pages(void* ptr, size_t bytes);

}  // namespace kiln
