#include "calib/calib_data.h"

#include <gtest/gtest.h>

#include <fstream>

#include "util/testutil.h"

namespace sinkq {
namespace {

using testing::error_of;
using testing::shared_dir;
using testing::TempDir;

std::unique_ptr<Tokenizer> stories_tok() { return Tokenizer::load(shared_dir() + "/models/stories260K"); }

std::vector<int32_t> tokens_of(const Tokenizer& tok, const std::string& text) {
  EncodeOptions raw;
  raw.add_special = false;
  raw.parse_special = false;
  return tok.encode(text, raw);
}

TEST(CalibData, JsonlSamplesAreSeededContiguousSlicesOfOneDocument) {
  auto tok = stories_tok();
  const std::string file = shared_dir() + "/data/c4/c4_train_00000_first1000.jsonl";
  CalibOptions o;
  o.samples = 4;
  o.len = 64;
  o.seed = 7;
  const CalibSet a = load_calib(file, *tok, o);
  const CalibSet b = load_calib(file, *tok, o);
  EXPECT_EQ(a.format, "jsonl");
  EXPECT_EQ(a.documents, 1000);
  EXPECT_GT(a.eligible, 0);
  EXPECT_LE(a.eligible, a.documents);
  ASSERT_EQ(a.samples.size(), 4u);
  EXPECT_EQ(a.samples, b.samples);  // reproducible
  for (const auto& s : a.samples) {
    ASSERT_EQ(s.size(), 64u);
    EXPECT_EQ(s[0], tok->bos_id());
    for (size_t i = 1; i < s.size(); ++i) EXPECT_NE(s[i], tok->bos_id());
  }
  o.seed = 8;
  EXPECT_NE(load_calib(file, *tok, o).samples, a.samples);
}

TEST(CalibData, TextFileIsOneDocumentAndSamplesAreItsSubsequences) {
  auto tok = stories_tok();
  TempDir d;
  const std::string text = "Once upon a time there was a little cat. The cat liked milk.\nIt was happy.\n";
  std::ofstream(d.file("t.txt")) << text;
  const std::vector<int32_t> all = tokens_of(*tok, text);
  CalibOptions o;
  o.samples = 16;
  o.len = 9;
  o.bos = false;
  const CalibSet s = load_calib(d.file("t.txt"), *tok, o);
  EXPECT_EQ(s.format, "text");
  EXPECT_EQ(s.documents, 1);
  EXPECT_FALSE(s.bos);
  for (const auto& sample : s.samples) {
    ASSERT_EQ(sample.size(), 9u);
    EXPECT_NE(std::search(all.begin(), all.end(), sample.begin(), sample.end()), all.end());
  }
}

// The ids format: the lines' token ids verbatim (the first N lines, the first L ids of each), so
// two implementations calibrate on the same tokens; what load_calib draws, written as ids, reads
// back as the same samples.
TEST(CalibData, IdsFileGivesItsSamplesVerbatim) {
  auto tok = stories_tok();
  TempDir d;
  CalibOptions o;
  o.samples = 3;
  o.len = 16;
  o.seed = 3;
  const CalibSet drawn = load_calib(shared_dir() + "/data/c4/c4_train_00000_first1000.jsonl", *tok, o);
  {
    std::ofstream f(d.file("ids.jsonl"));
    for (const auto& smp : drawn.samples) {
      f << "{\"ids\": [";
      for (size_t i = 0; i < smp.size(); ++i) f << (i ? "," : "") << smp[i];
      f << ", 5, 6]}\n";  // longer than L: the first L ids are taken
    }
  }
  const CalibSet back = load_calib(d.file("ids.jsonl"), *tok, o);
  EXPECT_EQ(back.format, "ids");
  EXPECT_EQ(back.samples, drawn.samples);
  EXPECT_TRUE(back.bos);  // every sample starts with [BOS]
  o.samples = 2;          // fewer than the file holds: the first lines
  EXPECT_EQ(load_calib(d.file("ids.jsonl"), *tok, o).samples,
            std::vector<std::vector<int32_t>>(drawn.samples.begin(), drawn.samples.begin() + 2));
  o.samples = 4;  // more than the file holds
  EXPECT_NE(error_of([&] { load_calib(d.file("ids.jsonl"), *tok, o); }).find("holds 3 samples"), std::string::npos);
  o.samples = 1;
  o.len = 20;  // longer than a line
  EXPECT_NE(error_of([&] { load_calib(d.file("ids.jsonl"), *tok, o); }).find("line 1"), std::string::npos);
  o.len = 2;
  std::ofstream(d.file("bad.jsonl")) << "{\"ids\": [1, 100000]}\n";
  EXPECT_NE(error_of([&] { load_calib(d.file("bad.jsonl"), *tok, o); }).find("ids[1] = 100000"), std::string::npos);
  std::ofstream(d.file("bad2.jsonl")) << "{\"ids\": [1, 2]}\n{\"ids\": \"x\"}\n";
  o.samples = 2;
  EXPECT_NE(error_of([&] { load_calib(d.file("bad2.jsonl"), *tok, o); }).find("line 2"), std::string::npos);
}

TEST(CalibData, ErrorsNameTheFileAndTheProblem) {
  auto tok = stories_tok();
  TempDir d;
  CalibOptions o;
  o.len = 1000000;
  std::ofstream(d.file("short.txt")) << "A short text.";
  EXPECT_NE(error_of([&] { load_calib(d.file("short.txt"), *tok, o); }).find("longest"), std::string::npos);
  o.len = 8;
  std::ofstream(d.file("bad.jsonl")) << "{\"text\": \"hello there my friend how are you\"}\n{\"txt\": 1}\n";
  const std::string e = error_of([&] { load_calib(d.file("bad.jsonl"), *tok, o); });
  EXPECT_NE(e.find("bad.jsonl"), std::string::npos);
  EXPECT_NE(e.find("line 2"), std::string::npos);
  std::ofstream(d.file("empty.txt")) << "";
  EXPECT_NE(error_of([&] { load_calib(d.file("empty.txt"), *tok, o); }).find("empty"), std::string::npos);
  EXPECT_NE(error_of([&] { load_calib(d.file("missing.txt"), *tok, o); }).find("missing.txt"), std::string::npos);
  o.samples = 0;
  EXPECT_NE(error_of([&] { load_calib(d.file("short.txt"), *tok, o); }).find("samples"), std::string::npos);
}

}  // namespace
}  // namespace sinkq
