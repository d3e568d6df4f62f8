// tests/kernels/cpu_features_test.cc — ISA selection, thread count, bandwidth probe.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <string>

#include "core/error.h"
#include "kernels/cpu_features.h"
#include "kernels/membw.h"
#include "kernels/ops.h"
#include "kernel_test_util.h"

namespace sinkq {
namespace {

TEST(CpuFeatures, SetIsaUpToDetected) {
  ktest::StateGuard guard;
  for (Isa isa : ktest::all_isas()) {
    set_isa(isa);
    EXPECT_EQ(active_isa(), isa);
  }
  if (detected_isa() != Isa::Avx512) {
    EXPECT_THROW(set_isa(Isa::Avx512), Error);
  }
  EXPECT_EQ(isa_name(Isa::Scalar), "scalar");
  EXPECT_EQ(isa_name(Isa::Avx2), "avx2");
  EXPECT_EQ(isa_name(Isa::Avx512), "avx512");
  std::printf("detected ISA: %s, threads: %d\n", std::string(isa_name(detected_isa())).c_str(), num_threads());
}

// As EnvOverride's child process: checks what SINKQ_ISA did to a fresh process. On its own: the
// active ISA is the detected one unless SINKQ_ISA says otherwise.
TEST(CpuFeatures, ChildSeesEnvIsa) {
  const char* expect = std::getenv("SINKQ_EXPECT_ISA");
  if (!expect) {
    const char* env = std::getenv("SINKQ_ISA");
    EXPECT_EQ(std::string(isa_name(active_isa())), env ? std::string(env) : std::string(isa_name(detected_isa())));
    return;
  }
  if (std::string(expect) == "error") {
    EXPECT_THROW(active_isa(), Error);
  } else {
    EXPECT_EQ(std::string(isa_name(active_isa())), expect);
  }
}

// SINKQ_ISA is read once per process, so each setting is checked in a child (this binary).
TEST(CpuFeatures, EnvOverride) {
  char self[4096] = {};
  ASSERT_GT(readlink("/proc/self/exe", self, sizeof(self) - 1), 0);
  auto child = [&self](const std::string& env, const std::string& expect) {
    const std::string cmd = "SINKQ_ISA=" + env + " SINKQ_EXPECT_ISA=" + expect + " '" +
                            std::string(self) + "' --gtest_filter=CpuFeatures.ChildSeesEnvIsa >/dev/null 2>&1";
    return std::system(cmd.c_str());
  };
  for (Isa isa : ktest::all_isas()) {
    const std::string name(isa_name(isa));
    EXPECT_EQ(child(name, name), 0) << name;
  }
  EXPECT_EQ(child("sse9", "error"), 0);
  if (detected_isa() != Isa::Avx512) {
    EXPECT_EQ(child("avx512", "error"), 0);
  }
  EXPECT_NE(child("avx2", "scalar"), 0);  // the child really checks
}

TEST(Threads, SetAndValidate) {
  ktest::StateGuard guard;
  EXPECT_GE(num_threads(), 1);
  set_num_threads(1);
  EXPECT_EQ(num_threads(), 1);
  EXPECT_THROW(set_num_threads(0), Error);
}

TEST(MemBw, ReturnsAPlausibleFigure) {
  const double gbs = measure_read_bandwidth_gbs(size_t(64) << 20, 1);
  EXPECT_GT(gbs, 0.5);
  EXPECT_LT(gbs, 10000.0);
}

}  // namespace
}  // namespace sinkq
