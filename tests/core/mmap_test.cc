// tests/core/mmap_test.cc — MappedFile, read_file, write_file_atomic, AtomicFileWriter.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <string>

#include "core/error.h"
#include "core/mmap.h"
#include "util/testutil.h"

namespace sinkq {
namespace {

using sinkq::testing::error_of;
using ::testing::HasSubstr;
using sinkq::testing::TempDir;
namespace fs = std::filesystem;

std::vector<std::string> list_dir(const std::string& dir) {
  std::vector<std::string> v;
  for (const auto& e : fs::directory_iterator(dir)) v.push_back(e.path().filename().string());
  std::sort(v.begin(), v.end());
  return v;
}

TEST(MappedFile, MapsContents) {
  TempDir d;
  write_file_atomic(d.file("a.bin"), std::string("hello\0world", 11));
  MappedFile m = MappedFile::open(d.file("a.bin"));
  ASSERT_EQ(m.size(), 11u);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(m.data()), m.size()), std::string("hello\0world", 11));
  EXPECT_EQ(m.path(), d.file("a.bin"));
  MappedFile moved = std::move(m);
  EXPECT_EQ(moved.size(), 11u);
  EXPECT_EQ(m.data(), nullptr);  // NOLINT(bugprone-use-after-move): moved-from is empty
  MappedFile other;
  other = std::move(moved);
  EXPECT_EQ(other.data()[0], 'h');
}

TEST(MappedFile, EmptyFileMapsToSizeZero) {
  TempDir d;
  write_file_atomic(d.file("empty"), "");
  MappedFile m = MappedFile::open(d.file("empty"));
  EXPECT_EQ(m.size(), 0u);
  EXPECT_EQ(m.data(), nullptr);
}

TEST(MappedFile, ErrorsNameThePath) {
  TempDir d;
  EXPECT_THAT(error_of([&] { MappedFile::open(d.file("nope.bin")); }),
              AllOf(HasSubstr(d.file("nope.bin")), HasSubstr("No such file")));
  EXPECT_THAT(error_of([&] { MappedFile::open(d.path()); }),
              AllOf(HasSubstr(d.path()), HasSubstr("not a regular file")));
}

TEST(ReadFile, ReadsAndRejectsDirectories) {
  TempDir d;
  std::string big(200000, 'x');
  big[123456] = 'y';
  write_file_atomic(d.file("big.txt"), big);
  EXPECT_EQ(read_file(d.file("big.txt")), big);
  EXPECT_THAT(error_of([&] { read_file(d.file("missing.txt")); }), HasSubstr(d.file("missing.txt")));
  // std::ifstream would have returned "" for a directory.
  EXPECT_THAT(error_of([&] { read_file(d.path()); }), AllOf(HasSubstr(d.path()), HasSubstr("regular")));
}

// A named pipe (issue 18: model.safetensors as a FIFO hung `sinkq ppl`) is refused at once by both
// readers, without blocking in open(2) for a writer that never comes.
TEST(ReadFile, FifoIsRefusedWithoutBlocking) {
  TempDir d;
  const std::string p = d.file("model.safetensors");
  ASSERT_EQ(::mkfifo(p.c_str(), 0600), 0);
  EXPECT_THAT(error_of([&] { read_file(p); }), AllOf(HasSubstr(p), HasSubstr("not a regular file")));
  EXPECT_THAT(error_of([&] { MappedFile::open(p); }), AllOf(HasSubstr(p), HasSubstr("not a regular file")));
}

TEST(WriteFileAtomic, WritesReplacesAndLeavesNoTempFile) {
  TempDir d;
  write_file_atomic(d.file("out.txt"), "first");
  write_file_atomic(d.file("out.txt"), "second, longer");
  EXPECT_EQ(read_file(d.file("out.txt")), "second, longer");
  EXPECT_EQ(list_dir(d.path()), std::vector<std::string>{"out.txt"});
}

TEST(WriteFileAtomic, MissingDirectoryErrorsAndLeavesNothing) {
  TempDir d;
  const std::string p = d.file("no/such/dir/out.txt");
  EXPECT_THAT(error_of([&] { write_file_atomic(p, "x"); }), HasSubstr(p));
  EXPECT_TRUE(list_dir(d.path()).empty());
}

TEST(AtomicFileWriter, StreamsAndCommits) {
  TempDir d;
  {
    AtomicFileWriter w(d.file("s.bin"));
    w.write("abc");
    w.write("def", 3);
    EXPECT_EQ(w.bytes_written(), 6u);
    EXPECT_FALSE(fs::exists(d.file("s.bin")));  // invisible until commit
    w.commit();
  }
  EXPECT_EQ(read_file(d.file("s.bin")), "abcdef");
  EXPECT_EQ(list_dir(d.path()), std::vector<std::string>{"s.bin"});
}

TEST(AtomicFileWriter, AbandonedWriteKeepsOldContentsAndRemovesTemp) {
  TempDir d;
  write_file_atomic(d.file("keep.txt"), "old");
  {
    AtomicFileWriter w(d.file("keep.txt"));
    w.write("new partial");
    EXPECT_TRUE(fs::exists(w.temp_path()));
  }  // no commit: as if an exception had unwound
  EXPECT_EQ(read_file(d.file("keep.txt")), "old");
  EXPECT_EQ(list_dir(d.path()), std::vector<std::string>{"keep.txt"});
}

TEST(AtomicFileWriter, TempNamesAreUniquePerWriter) {
  TempDir d;
  AtomicFileWriter a(d.file("x")), b(d.file("x"));
  EXPECT_NE(a.temp_path(), b.temp_path());
}

TEST(Error, CheckFormatsMessage) {
  EXPECT_THAT(error_of([] { SINKQ_CHECK(1 + 1 == 3, "field '{}' in {} is {}", "n", "f.json", 7); }),
              "field 'n' in f.json is 7");
  EXPECT_NO_THROW(SINKQ_CHECK(true, "never"));
}

}  // namespace
}  // namespace sinkq
