#include "kiln/core/threads.h"

namespace kiln {

int num_threads() { return omp_get_max_threads(); }

}  // namespace kiln
