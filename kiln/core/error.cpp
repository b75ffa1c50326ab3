#include "kiln/core/error.h"

namespace kiln::detail {

void check_failed(const char* file, int line, const char* cond, const std::string& msg) {
  std::string text = std::string("internal error at ") + file + ":" + std::to_string(line) +
                     ": check `" + cond + "` failed";
  if (!msg.empty()) text += ": " + msg;
  throw InternalError(text);
}

}  // namespace kiln::detail
