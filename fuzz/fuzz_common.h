// fuzz/fuzz_common.h — what the libFuzzer targets share: the input written to a file in a private
// scratch directory (the loaders read paths: they mmap and stat them, as the CLI does), and the
// rule that only sinkq::Error may leave a loader. Any other exception (a JSON library error, an
// out_of_range, bad_alloc) escapes the target and libFuzzer reports it as a crash: a loader must
// turn every bad input into its own clear error. Memory: libFuzzer's -malloc_limit_mb catches a
// loader that allocates a size from the file before checking it against the file.
#pragma once

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.h"

namespace sinkq::fuzz {

// A directory of this process (removed at exit), e.g. /dev/shm/sinkq-fuzz-1234.
// Allocated once and never freed: the exit handler that removes it runs after static destructors.
inline const std::string& scratch() {
  static const std::string* dir = [] {
    const char* base = std::getenv("SINKQ_FUZZ_TMP");
    auto* d = new std::string(std::string(base ? base : (std::filesystem::is_directory("/dev/shm") ? "/dev/shm" : "/tmp")) +
                              "/sinkq-fuzz-" + std::to_string(::getpid()));
    std::filesystem::create_directories(*d);
    std::atexit([] { std::error_code ec; std::filesystem::remove_all(scratch(), ec); });
    return d;
  }();
  return *dir;
}

// Writes the input to scratch()/name and returns the path.
inline std::string put(const std::string& name, const uint8_t* data, size_t size) {
  const std::string p = scratch() + "/" + name;
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(data), std::streamsize(size));
  f.close();
  if (!f) std::abort();  // the harness itself failed: not a finding
  return p;
}

// Runs fn; sinkq::Error is the expected outcome for bad input.
template <class F>
void expect_only_sinkq_errors(F&& fn) {
  try {
    fn();
  } catch (const sinkq::Error&) {
  }
}

// What an accepted tokenizer must survive: encode a mixed text (double space, digits, accents,
// CJK, an emoji, special-token spellings, control characters) and decode the ids.
template <class Tok>
void exercise(const Tok& t) {
  const std::vector<int32_t> ids = t.encode("Hello  world, 1234 caf\u00e9 \u4e2d\u6587 \U0001F600 <s></s>\n\tend");
  (void)t.decode(ids);
  (void)t.decode_bytes(ids, false);
}

}  // namespace sinkq::fuzz
