// tests/cli/cli_run.h — runs the sinkq binary (SINKQ_BINARY) for the CLI tests.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "core/mmap.h"
#include "util/testutil.h"

namespace sinkq::clitest {

struct RunResult {
  int rc = -1;
  bool crashed = false;
  std::string out, err;
};

// Single-quoted for /bin/sh.
inline std::string quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) {
    if (c == '\'')
      q.append("'\\''");
    else
      q.push_back(c);
  }
  return q + "'";
}

// Runs `sinkq args...` with stdin closed; stdout and stderr captured whole. `shell_prefix`: shell
// commands before it (e.g. "ulimit -d 1048576;").
inline RunResult run(const std::vector<std::string>& args, const std::string& shell_prefix = "") {
  testing::TempDir tmp;
  std::string cmd = shell_prefix + quote(SINKQ_BINARY);
  for (const auto& a : args) {
    cmd.push_back(' ');  // not `" " + quote(a)`: GCC 12 warns falsely on it (-Wrestrict, PR 105329)
    cmd += quote(a);
  }
  cmd += " >" + tmp.file("out") + " 2>" + tmp.file("err") + " </dev/null";
  const int st = std::system(cmd.c_str());
  RunResult r;
  r.crashed = WIFSIGNALED(st) || (WIFEXITED(st) && WEXITSTATUS(st) >= 128);
  r.rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  r.out = read_file(tmp.file("out"));
  r.err = read_file(tmp.file("err"));
  return r;
}

// A failing run: exit 1, no crash, and stderr names what is wrong.
inline void expect_error(const RunResult& r, const std::vector<std::string>& needles) {
  EXPECT_FALSE(r.crashed) << r.err;
  EXPECT_EQ(r.rc, 1) << r.err;
  for (const auto& n : needles) EXPECT_NE(r.err.find(n), std::string::npos) << "stderr lacks '" << n << "': " << r.err;
}

}  // namespace sinkq::clitest
