// Two error channels (see docs/notes/errors.md):
//  - kiln::Error for anything a user can cause: bad files, fields, arguments. The message starts with
//    "[where]" naming the file, tensor, field or argument at fault.
//  - KILN_CHECK for invariants of kiln itself; a failure is a bug and throws kiln::InternalError.
// The library never aborts on bad input.
//
// Example:
//   if (n <= 0) throw kiln::Error("max_new_tokens", "must be positive, got " + std::to_string(n));
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace kiln {

class Error : public std::runtime_error {
 public:
  Error(const std::string& where, const std::string& what)
      : std::runtime_error("[" + where + "] " + what), where_(where) {}
  const std::string& where() const { return where_; }

 private:
  std::string where_;
};

class InternalError : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

namespace detail {
[[noreturn]] void check_failed(const char* file, int line, const char* cond, const std::string& msg);

inline std::string concat() { return {}; }
template <typename... Args>
std::string concat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
}  // namespace detail

}  // namespace kiln

#define KILN_CHECK(cond, ...)                                                              \
  do {                                                                                     \
    if (!(cond))                                                                           \
      ::kiln::detail::check_failed(__FILE__, __LINE__, #cond,                              \
                                   ::kiln::detail::concat(__VA_ARGS__));                   \
  } while (0)

#ifdef NDEBUG
#define KILN_DCHECK(cond, ...) \
  do {                         \
  } while (0)
#else
#define KILN_DCHECK(cond, ...) KILN_CHECK(cond, __VA_ARGS__)
#endif
