// tests/io/safetensors_test.cc — writer layout, round trips, and every malformed-file error.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "core/error.h"
#include "core/mmap.h"
#include "io/safetensors.h"
#include "util/testutil.h"

namespace sinkq {
namespace {

using sinkq::testing::error_of;
using ::testing::AllOf;
using ::testing::HasSubstr;
using sinkq::testing::raw_safetensors;
using sinkq::testing::TempDir;

// ------------------------------------------------------------------------------------- writer

TEST(Safetensors, WriterMatchesTheFormatByteForByte) {
  TempDir d;
  const float x[2] = {1.0f, -2.0f};
  write_safetensors(d.file("a.safetensors"),
                    {{"x", DType::F32, {2}, std::as_bytes(std::span(x))}});
  std::string header = R"({"x":{"data_offsets":[0,8],"dtype":"F32","shape":[2]}})";  // 54 bytes
  header.append(2, ' ');                                                              // pad to 56
  EXPECT_EQ(read_file(d.file("a.safetensors")),
            raw_safetensors(header, std::string_view(reinterpret_cast<const char*>(x), 8)));
}

TEST(Safetensors, RoundTripAllDtypesShapesAndMetadata) {
  TempDir d;
  const std::string p = d.file("t.safetensors");
  std::vector<float> f32 = {1.5f, -2.25f, 3.0f, 0.0f, 7.0f, 8.0f};
  std::vector<uint16_t> f16 = {f32_to_f16(0.5f), f32_to_f16(-1.0f), f32_to_f16(2.0f)};
  std::vector<uint16_t> bf16 = {f32_to_bf16(3.5f), f32_to_bf16(-4.0f)};
  float scalar = 42.0f;
  const std::vector<TensorToWrite> in = {
      {"w.f32", DType::F32, {2, 3}, std::as_bytes(std::span(f32))},
      {"a.f16", DType::F16, {3}, std::as_bytes(std::span(f16))},  // odd numel: 6 bytes
      {"b.bf16", DType::BF16, {1, 2}, std::as_bytes(std::span(bf16))},
      {"scalar", DType::F32, {}, std::as_bytes(std::span(&scalar, 1))},
      {"empty", DType::F16, {0, 4}, {}},
  };
  const std::map<std::string, std::string> meta = {{"format", "pt"}, {"note", "sinkq test"}};
  write_safetensors(p, in, meta);

  auto f = SafetensorsFile::open(p);
  EXPECT_EQ(f->path(), p);
  EXPECT_EQ(f->metadata(), meta);
  ASSERT_EQ(f->tensors().size(), in.size());
  std::vector<std::string> names;
  for (const auto& t : f->tensors()) names.push_back(t.name);
  EXPECT_EQ(names, (std::vector<std::string>{"a.f16", "b.bf16", "empty", "scalar", "w.f32"}));
  for (const auto& w : in) {
    const TensorInfo* t = f->find(w.name);
    ASSERT_NE(t, nullptr) << w.name;
    EXPECT_EQ(t->dtype, w.dtype);
    EXPECT_EQ(t->shape, w.shape);
    EXPECT_EQ(t->file, p);
    ASSERT_EQ(t->nbytes, w.bytes.size());
    if (t->nbytes) {
      EXPECT_EQ(std::memcmp(t->data, w.bytes.data(), t->nbytes), 0) << w.name;
    }
    // Element-size alignment although an odd-sized F16 tensor sorts first by name.
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t->data) % dtype_size(t->dtype), 0u) << w.name;
  }
  EXPECT_EQ(f->find("w.f32")->shape_str(), "[2, 3]");
  EXPECT_EQ(f->find("scalar")->numel(), 1);
  EXPECT_EQ(f->find("empty")->numel(), 0);
  EXPECT_EQ(f->find("nope"), nullptr);

  // Header length is a multiple of 8 and the padding is spaces.
  const std::string raw = read_file(p);
  uint64_t n = 0;
  std::memcpy(&n, raw.data(), 8);
  EXPECT_EQ(n % 8, 0u);
  const std::string header = raw.substr(8, n);
  EXPECT_EQ(header.front(), '{');
  const size_t close = header.rfind('}');
  EXPECT_LT(header.size() - 1 - close, 8u);
  EXPECT_EQ(header.find_first_not_of(' ', close + 1), std::string::npos);
}

TEST(Safetensors, WriterIsDeterministicAndOrderIndependent) {
  TempDir d;
  std::vector<float> a(10, 1.0f), b(7, 2.0f);
  std::vector<TensorToWrite> in = {{"b", DType::F32, {7}, std::as_bytes(std::span(b))},
                                   {"a", DType::F32, {2, 5}, std::as_bytes(std::span(a))}};
  write_safetensors(d.file("1.safetensors"), in, {{"k", "v"}});
  std::swap(in[0], in[1]);
  write_safetensors(d.file("2.safetensors"), in, {{"k", "v"}});
  EXPECT_EQ(read_file(d.file("1.safetensors")), read_file(d.file("2.safetensors")));
  size_t files = 0;
  for (const auto& e : std::filesystem::directory_iterator(d.path())) {
    ++files;
    EXPECT_EQ(e.path().string().find(".tmp."), std::string::npos);
  }
  EXPECT_EQ(files, 2u);
}

TEST(Safetensors, WriterRejectsBadInput) {
  TempDir d;
  const std::string p = d.file("bad.safetensors");
  std::vector<float> v(3);
  EXPECT_THAT(error_of([&] { write_safetensors(p, {{"t", DType::F32, {4}, std::as_bytes(std::span(v))}}); }),
              AllOf(HasSubstr(p), HasSubstr("'t'"), HasSubstr("16 bytes, got 12")));
  EXPECT_THAT(error_of([&] {
                write_safetensors(p, {{"t", DType::F32, {3}, std::as_bytes(std::span(v))},
                                      {"t", DType::F32, {3}, std::as_bytes(std::span(v))}});
              }),
              HasSubstr("given twice"));
  EXPECT_THAT(error_of([&] { write_safetensors(p, {{"t", DType::F32, {-3}, {}}}); }), HasSubstr("negative"));
  EXPECT_FALSE(std::filesystem::exists(p));
}

TEST(Safetensors, ReadsTheRealStoriesModel) {
  const std::string p = sinkq::testing::shared_dir() + "/models/stories260K/model.safetensors";
  auto f = SafetensorsFile::open(p);
  EXPECT_EQ(f->tensors().size(), 1u + 5 * 9 + 1);  // embed, 5 layers x 9, norm (tied: no lm_head)
  const TensorInfo* t = f->find("model.layers.0.mlp.down_proj.weight");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->shape, (std::vector<int64_t>{64, 172}));
  EXPECT_EQ(t->dtype, DType::F32);
}

// ------------------------------------------------------------------------------ malformed files

class Malformed : public ::testing::Test {
 protected:
  // Writes `contents` to a fresh file and returns the error message opening it produces.
  std::string open_error(const std::string& contents) {
    write_file_atomic(path_, contents);
    return error_of([&] { SafetensorsFile::open(path_); });
  }
  std::string entry_error(const std::string& entries, size_t data_bytes = 64) {
    return open_error(raw_safetensors("{" + entries + "}", std::string(data_bytes, '\0')));
  }
  TempDir dir_;
  std::string path_ = dir_.file("bad.safetensors");
};

TEST_F(Malformed, TooShortOrEmpty) {
  EXPECT_THAT(open_error("abc"), AllOf(HasSubstr(path_), HasSubstr("shorter than the 8-byte")));
  EXPECT_THAT(open_error(""), AllOf(HasSubstr(path_), HasSubstr("0 bytes")));
}

TEST_F(Malformed, HeaderLengthPastEndOfFile) {
  std::string raw = raw_safetensors(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", "abcd");
  const uint64_t n = raw.size();  // claims more header than the file holds
  std::memcpy(raw.data(), &n, 8);
  EXPECT_THAT(open_error(raw), AllOf(HasSubstr(path_), HasSubstr("runs past the end of the file")));
}

TEST_F(Malformed, AbsurdHeaderLength) {
  std::string raw = raw_safetensors("{}");
  const uint64_t n = uint64_t(1) << 60;
  std::memcpy(raw.data(), &n, 8);
  EXPECT_THAT(open_error(raw), AllOf(HasSubstr(path_), HasSubstr("absurd")));
}

TEST_F(Malformed, HeaderNotJsonOrNotObject) {
  EXPECT_THAT(open_error(raw_safetensors("{\"a\": [1, 2", "")), AllOf(HasSubstr(path_), HasSubstr("not valid JSON")));
  EXPECT_THAT(open_error(raw_safetensors("", "")), AllOf(HasSubstr(path_), HasSubstr("not valid JSON")));
  EXPECT_THAT(open_error(raw_safetensors("[1, 2, 3]", "")), AllOf(HasSubstr(path_), HasSubstr("must be a JSON object")));
}

TEST_F(Malformed, EntryFieldsMissingOrWrongType) {
  EXPECT_THAT(entry_error(R"("w": {"shape": [1], "data_offsets": [0, 4]})"),
              AllOf(HasSubstr(path_), HasSubstr("'w'"), HasSubstr("missing 'dtype'")));
  EXPECT_THAT(entry_error(R"("w": {"dtype": "F32", "data_offsets": [0, 4]})"),
              AllOf(HasSubstr(path_), HasSubstr("'w'"), HasSubstr("missing 'shape'")));
  EXPECT_THAT(entry_error(R"("w": {"dtype": "F32", "shape": [1]})"),
              AllOf(HasSubstr(path_), HasSubstr("'w'"), HasSubstr("missing 'data_offsets'")));
  EXPECT_THAT(entry_error(R"("w": 5)"), AllOf(HasSubstr("'w'"), HasSubstr("must be an object")));
  EXPECT_THAT(entry_error(R"("w": {"dtype": "F32", "shape": [1.5], "data_offsets": [0, 4]})"),
              AllOf(HasSubstr("'w'"), HasSubstr("integers")));
  EXPECT_THAT(entry_error(R"("w": {"dtype": "F32", "shape": [1], "data_offsets": [0]})"),
              AllOf(HasSubstr("'w'"), HasSubstr("data_offsets")));
  EXPECT_THAT(entry_error(R"("__metadata__": {"k": 1})"), AllOf(HasSubstr(path_), HasSubstr("'k'")));
}

TEST_F(Malformed, UnknownAndUnsupportedDtypes) {
  EXPECT_THAT(entry_error(R"("w": {"dtype": "Q7", "shape": [1], "data_offsets": [0, 4]})"),
              AllOf(HasSubstr(path_), HasSubstr("'w'"), HasSubstr("unknown dtype 'Q7'")));
  EXPECT_THAT(entry_error(R"("w.i8": {"dtype": "I8", "shape": [4], "data_offsets": [0, 4]})"),
              AllOf(HasSubstr(path_), HasSubstr("'w.i8'"), HasSubstr("I8"), HasSubstr("not supported")));
  EXPECT_THAT(entry_error(R"("w": {"dtype": "F64", "shape": [1], "data_offsets": [0, 8]})"),
              AllOf(HasSubstr("'w'"), HasSubstr("F64"), HasSubstr("not supported")));
}

TEST_F(Malformed, NegativeDimension) {
  EXPECT_THAT(entry_error(R"("neg": {"dtype": "F32", "shape": [-1, 2], "data_offsets": [0, 8]})"),
              AllOf(HasSubstr(path_), HasSubstr("'neg'"), HasSubstr("negative dimension -1")));
}

TEST_F(Malformed, WrongNumel) {
  EXPECT_THAT(entry_error(R"("w": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]})"),
              AllOf(HasSubstr(path_), HasSubstr("'w'"), HasSubstr("needs 12 bytes"), HasSubstr("span 8")));
  EXPECT_THAT(entry_error(R"("w": {"dtype": "BF16", "shape": [4294967296, 4294967296], "data_offsets": [0, 8]})"),
              AllOf(HasSubstr("'w'"), HasSubstr("overflows")));
}

TEST_F(Malformed, DataPastTheEnd) {
  EXPECT_THAT(entry_error(R"("big": {"dtype": "F32", "shape": [32], "data_offsets": [0, 128]})", 64),
              AllOf(HasSubstr(path_), HasSubstr("'big'"), HasSubstr("past the end of the data section (64 bytes)")));
  EXPECT_THAT(entry_error(R"("rev": {"dtype": "F32", "shape": [0], "data_offsets": [8, 4]})"),
              AllOf(HasSubstr("'rev'"), HasSubstr("begin > end")));
}

TEST_F(Malformed, OverlappingTensors) {
  EXPECT_THAT(entry_error(R"("a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                             "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]})"),
              AllOf(HasSubstr(path_), HasSubstr("'a'"), HasSubstr("'b'"), HasSubstr("overlap")));
  // Empty tensors at a boundary are fine.
  write_file_atomic(path_, raw_safetensors(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
      "e": {"dtype": "F16", "shape": [0], "data_offsets": [8, 8]},
      "b": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}})", std::string(16, '\0')));
  EXPECT_EQ(SafetensorsFile::open(path_)->tensors().size(), 3u);
}

// The tensors must tile the data section (the format's rule): a gap, trailing bytes, or a header
// length a byte short (it still parses — the header ends in spaces — but shifts every tensor) are
// errors naming the bytes, where they used to load shifted weights (nan ppl, exit 0).
TEST_F(Malformed, TensorsMustTileTheDataSection) {
  const std::string two = R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
      "b": {"dtype": "F32", "shape": [2], "data_offsets": [16, 24]}})";
  EXPECT_THAT(open_error(raw_safetensors(two, std::string(24, '\0'))),
              AllOf(HasSubstr(path_), HasSubstr("bytes [8, 16)"), HasSubstr("no tensor"), HasSubstr("'b'")));
  const std::string one = R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})";
  EXPECT_THAT(open_error(raw_safetensors(one, std::string(8 + 100, '\0'))),
              AllOf(HasSubstr(path_), HasSubstr("trailing bytes"), HasSubstr("108 bytes")));
  // A valid file, then its header length lowered by one.
  std::string file = raw_safetensors(one + "    ", std::string(8, '\0'));
  uint64_t n = 0;
  std::memcpy(&n, file.data(), 8);
  --n;
  std::memcpy(file.data(), &n, 8);
  EXPECT_THAT(open_error(file), AllOf(HasSubstr(path_), HasSubstr("trailing bytes"), HasSubstr("header length")));
}

TEST_F(Malformed, DuplicateTensorName) {
  EXPECT_THAT(entry_error(R"("a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
                             "a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]})"),
              AllOf(HasSubstr(path_), HasSubstr("'a' appears twice")));
}

// ---------------------------------------------------------------------------------- TensorStore

class Store : public ::testing::Test {
 protected:
  void write(const std::string& file, const std::vector<std::string>& names) {
    std::vector<TensorToWrite> ts;
    for (const auto& n : names) ts.push_back({n, DType::F32, {2}, std::as_bytes(std::span(v_))});
    write_safetensors(dir_.file(file), ts);
  }
  void index(const std::string& weight_map_json) {
    write_file_atomic(dir_.file("model.safetensors.index.json"),
                      R"({"metadata": {"total_size": 0}, "weight_map": )" + weight_map_json + "}");
  }
  std::string error() { return error_of([&] { TensorStore::open_dir(dir_.path()); }); }
  TempDir dir_;
  float v_[2] = {1, 2};
};

TEST_F(Store, ShardedIndex) {
  write("s1.safetensors", {"a", "b"});
  write("s2.safetensors", {"c"});
  index(R"({"a": "s1.safetensors", "b": "s1.safetensors", "c": "s2.safetensors"})");
  TensorStore s = TensorStore::open_dir(dir_.path());
  EXPECT_EQ(s.files().size(), 2u);
  EXPECT_EQ(s.all().size(), 3u);
  EXPECT_EQ(s.get("c").file, dir_.file("s2.safetensors"));
  EXPECT_EQ(s.find("zz"), nullptr);
  EXPECT_THAT(error_of([&] { s.get("zz"); }), AllOf(HasSubstr("missing tensor 'zz'"), HasSubstr(dir_.path())));
}

TEST_F(Store, IndexNamesMissingShard) {
  write("s1.safetensors", {"a"});
  index(R"({"a": "s1.safetensors", "b": "gone.safetensors"})");
  EXPECT_THAT(error(), AllOf(HasSubstr("model.safetensors.index.json"), HasSubstr("'b'"),
                             HasSubstr("'gone.safetensors'"), HasSubstr("does not exist")));
}

TEST_F(Store, IndexTensorNotInNamedShard) {
  write("s1.safetensors", {"a"});
  write("s2.safetensors", {"b"});
  index(R"({"a": "s1.safetensors", "b": "s1.safetensors"})");
  EXPECT_THAT(error(), AllOf(HasSubstr("index.json"), HasSubstr("'b'"), HasSubstr("'s1.safetensors'"),
                             HasSubstr("has no tensor")));
}

TEST_F(Store, DuplicateAcrossShards) {
  write("s1.safetensors", {"a", "dup"});
  write("s2.safetensors", {"dup"});
  index(R"({"a": "s1.safetensors", "dup": "s2.safetensors"})");
  EXPECT_THAT(error(), AllOf(HasSubstr("'dup'"), HasSubstr("s1.safetensors"), HasSubstr("s2.safetensors")));
  EXPECT_THAT(error_of([&] { TensorStore::open_files({dir_.file("s1.safetensors"), dir_.file("s2.safetensors")}); }),
              HasSubstr("'dup' appears in both"));
}

TEST_F(Store, BadIndexAndEmptyDirs) {
  EXPECT_THAT(error(), AllOf(HasSubstr(dir_.path()), HasSubstr("neither model.safetensors")));
  index(R"({"a": "../escape.safetensors"})");
  EXPECT_THAT(error(), HasSubstr("not a plain file name"));
  write_file_atomic(dir_.file("model.safetensors.index.json"), "{not json");
  EXPECT_THAT(error(), AllOf(HasSubstr("index.json"), HasSubstr("not valid JSON")));
  index("[]");
  EXPECT_THAT(error(), HasSubstr("'weight_map'"));
  EXPECT_THAT(error_of([&] { TensorStore::open_dir(dir_.file("nope")); }), HasSubstr("does not exist"));
}

TEST_F(Store, SingleFileWinsOverIndexAndShardErrorsPropagate) {
  write("model.safetensors", {"x"});
  index(R"({"a": "missing.safetensors"})");  // ignored: model.safetensors present (HF's order)
  EXPECT_NE(TensorStore::open_dir(dir_.path()).find("x"), nullptr);
  write_file_atomic(dir_.file("model.safetensors"), "short");
  EXPECT_THAT(error(), HasSubstr(dir_.file("model.safetensors")));
}

}  // namespace
}  // namespace sinkq
