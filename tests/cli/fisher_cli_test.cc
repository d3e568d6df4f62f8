// `sinkq calib fisher`: writes the Fisher file and says what it wrote; bad flags and an existing
// output are errors naming the flag / path, leaving nothing behind.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>

#include "cli/cli_run.h"
#include "io/safetensors.h"
#include "util/testutil.h"

namespace sinkq {
namespace {

using clitest::expect_error;
using clitest::run;

std::string stories() { return testing::shared_dir() + "/models/stories260K"; }
std::string sample_text() { return testing::shared_dir() + "/golden/stories260K/tinystories_sample.txt"; }

TEST(CliCalibFisher, WritesTheFileAndRefusesBadInput) {
  testing::TempDir tmp;
  const std::string out = tmp.file("f.safetensors");
  const auto r = run({"calib", "fisher", "-m", stories(), "--calib", sample_text(), "--calib-samples", "2",
                      "--calib-len", "32", "-o", out, "--json"});
  ASSERT_EQ(r.rc, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j.at("samples"), 2);
  EXPECT_EQ(j.at("tokens"), 64);
  EXPECT_EQ(j.at("mean_fisher_k").size(), 5u);
  EXPECT_NE(r.err.find("calib fisher: sample 2/2"), std::string::npos) << r.err;
  EXPECT_EQ(SafetensorsFile::open(out)->metadata().at("format"), "sinkq-fisher");
  expect_error(run({"calib", "fisher", "-m", stories(), "--calib", sample_text(), "-o", out}), {"already exists", "--force"});
  expect_error(run({"calib", "fisher", "-m", stories(), "--calib", sample_text(), "--calib-samples", "0", "-o",
                    tmp.file("g.safetensors")}),
               {"--calib-samples"});
  expect_error(run({"calib", "fisher", "-m", stories(), "--calib", tmp.file("missing.txt"), "-o", tmp.file("g.safetensors")}),
               {"missing.txt"});
  EXPECT_FALSE(std::filesystem::exists(tmp.file("g.safetensors")));
}

}  // namespace
}  // namespace sinkq
