// sinkq/core/error.h — the one error type of the project.
//
// Every failure a user can cause (bad file, bad flag, unsupported config) throws sinkq::Error with
// a message that names the file / tensor / field / flag. The CLI catches it, prints it, and exits 1.
// Programming errors (violated internal invariants) use SINKQ_ASSERT and abort in every build.
#pragma once

#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>

namespace sinkq {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

template <class... Args>
[[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) {
  throw Error(fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace sinkq

// Checks user-controllable input: throws sinkq::Error with the formatted message.
#define SINKQ_CHECK(cond, ...)                           \
  do {                                                   \
    if (!(cond)) ::sinkq::fail(__VA_ARGS__);             \
  } while (0)

// Internal invariant: never compiled out.
#define SINKQ_ASSERT(cond)                                                                \
  do {                                                                                    \
    if (!(cond)) {                                                                        \
      std::fprintf(stderr, "sinkq: internal error: %s at %s:%d\n", #cond, __FILE__, __LINE__); \
      std::abort();                                                                       \
    }                                                                                     \
  } while (0)
