// The CPU implementation of graph::Backend: maps each graph op to its kernel in kernels.h.
#pragma once

#include "kiln/graph/backend.h"

namespace kiln::cpu {

// The process-wide CPU backend (stateless apart from kernel caches; safe to share).
graph::Backend& cpu_backend();

}  // namespace kiln::cpu
