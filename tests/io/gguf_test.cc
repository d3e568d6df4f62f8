// The GGUF reader (io/gguf.h): files built byte by byte here, every corruption named, and the real
// SmolLM2 file from ../shared.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstring>
#include <fstream>

#include "core/error.h"
#include "io/gguf.h"
#include "util/testutil.h"

namespace sinkq {
namespace {

using ::testing::HasSubstr;

// A minimal GGUF writer: metadata and tensor infos as raw bytes, then aligned data.
struct Writer {
  std::string b;
  uint32_t version = 3;
  uint64_t n_tensors = 0, n_kv = 0;
  std::string kv, infos, data;
  size_t align = 32;

  template <class T>
  static void put(std::string& s, T v) { s.append(reinterpret_cast<const char*>(&v), sizeof v); }
  static void str(std::string& s, const std::string& v) { put<uint64_t>(s, v.size()); s += v; }
  void key(const std::string& k, uint32_t type) { str(kv, k); put<uint32_t>(kv, type); ++n_kv; }
  void u32(const std::string& k, uint32_t v) { key(k, 4); put(kv, v); }
  void i32(const std::string& k, int32_t v) { key(k, 5); put(kv, v); }
  void f32(const std::string& k, float v) { key(k, 6); put(kv, v); }
  void boolean(const std::string& k, bool v) { key(k, 7); put<uint8_t>(kv, v); }
  void string(const std::string& k, const std::string& v) { key(k, 8); str(kv, v); }
  void u64(const std::string& k, uint64_t v) { key(k, 10); put(kv, v); }
  void f64(const std::string& k, double v) { key(k, 12); put(kv, v); }
  void strings(const std::string& k, const std::vector<std::string>& v) {
    key(k, 9); put<uint32_t>(kv, 8); put<uint64_t>(kv, v.size());
    for (const auto& s : v) str(kv, s);
  }
  // A tensor of f32 values (type 0) or raw bytes of another type; data appended aligned.
  void tensor(const std::string& name, std::vector<uint64_t> ne, uint32_t type, const std::string& bytes) {
    while (data.size() % align) data += '\0';
    str(infos, name); put<uint32_t>(infos, uint32_t(ne.size()));
    for (uint64_t d : ne) put(infos, d);
    put(infos, type); put<uint64_t>(infos, data.size());
    data += bytes;
    ++n_tensors;
  }
  std::string bytes() const {
    std::string s = "GGUF";
    put(s, version); put(s, n_tensors); put(s, n_kv);
    s += kv + infos;
    while (s.size() % align) s += '\0';
    return s + data;
  }
};

std::string f32_bytes(std::vector<float> v) { return std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4); }

struct Files {
  testing::TempDir d;
  std::string write(const std::string& bytes) {
    const std::string p = d.file("m.gguf");
    std::ofstream(p, std::ios::binary).write(bytes.data(), std::streamsize(bytes.size()));
    return p;
  }
  std::string error_of(const std::string& bytes) {
    try {
      GgufFile::open(write(bytes));
    } catch (const Error& e) {
      return e.what();
    }
    return "(no error)";
  }
};

Writer valid() {
  Writer w;
  w.string("general.architecture", "llama");
  w.u32("llama.block_count", 2);
  w.i32("signed", -7);
  w.f32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
  w.boolean("tokenizer.ggml.add_bos_token", true);
  w.u64("big", 1ull << 40);
  w.f64("double", 0.25);
  w.strings("tokenizer.ggml.tokens", {"<s>", "a", "\xe2\x96\x81" "b"});
  w.tensor("a", {4, 2}, 0, f32_bytes({1, 2, 3, 4, 5, 6, 7, 8}));
  w.tensor("b", {3}, 0, f32_bytes({-1, -2, -3}));
  return w;
}

TEST(Gguf, ReadsMetadataAndTensors) {
  Files f;
  const auto g = GgufFile::open(f.write(valid().bytes()));
  EXPECT_EQ(g->version(), 3u);
  EXPECT_EQ(g->alignment(), 32u);
  EXPECT_EQ(g->get_string("general.architecture"), "llama");
  EXPECT_EQ(g->get_int("llama.block_count"), 2);
  EXPECT_EQ(g->get_int("signed"), -7);
  EXPECT_EQ(g->get_int("big"), int64_t(1) << 40);
  EXPECT_FLOAT_EQ(float(g->get_float("llama.attention.layer_norm_rms_epsilon")), 1e-5f);
  EXPECT_EQ(g->get_float("double"), 0.25);
  EXPECT_TRUE(g->metadata().at("tokenizer.ggml.add_bos_token").get<bool>());
  EXPECT_EQ(g->metadata().at("tokenizer.ggml.tokens")[2].get<std::string>(), "\xe2\x96\x81" "b");
  EXPECT_EQ(g->metadata_type("tokenizer.ggml.tokens"), 9u);
  ASSERT_EQ(g->tensors().size(), 2u);
  const GgufTensor* a = g->find("a");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->ne, (std::vector<int64_t>{4, 2}));
  EXPECT_EQ(a->nbytes, 32u);
  float v[8];
  std::memcpy(v, a->data, 32);
  EXPECT_EQ(v[7], 8.0f);
  const GgufTensor* b = g->find("b");
  EXPECT_EQ(b->offset, 32u);  // aligned after a's 32 bytes
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b->data) % 32, reinterpret_cast<uintptr_t>(a->data) % 32);
  EXPECT_EQ(g->find("c"), nullptr);
  EXPECT_THAT([&] { try { g->get_int("general.architecture"); } catch (const Error& e) { return std::string(e.what()); } return std::string(); }(),
              HasSubstr("'general.architecture' must be an integer"));
  EXPECT_THAT([&] { try { g->get_string("nope"); } catch (const Error& e) { return std::string(e.what()); } return std::string(); }(),
              HasSubstr("'nope' is missing"));
}

TEST(Gguf, VersionTwoAndCustomAlignment) {
  Files f;
  Writer w;
  w.version = 2;
  w.align = 64;
  w.u32("general.alignment", 64);
  w.tensor("a", {4, 2}, 0, f32_bytes({1, 2, 3, 4, 5, 6, 7, 8}));
  w.tensor("b", {3}, 0, f32_bytes({-1, -2, -3}));
  const auto g = GgufFile::open(f.write(w.bytes()));
  EXPECT_EQ(g->version(), 2u);
  EXPECT_EQ(g->alignment(), 64u);
  EXPECT_EQ(g->find("b")->offset, 64u);
}

TEST(Gguf, EveryCorruptionIsNamed) {
  Files f;
  const std::string good = valid().bytes();
  EXPECT_THAT(f.error_of("GGUX" + good.substr(4)), HasSubstr("not a GGUF file"));
  {
    Writer w = valid();
    w.version = 1;
    EXPECT_THAT(f.error_of(w.bytes()), HasSubstr("version 1 is not supported"));
  }
  EXPECT_THAT(f.error_of(good.substr(0, 30)), HasSubstr("metadata count 8 cannot fit in a 30-byte file"));
  EXPECT_THAT(f.error_of(good.substr(0, 150)), ::testing::MatchesRegex(".*(truncated file|runs past the end).*"));
  {  // a string length far past the end
    Writer w;
    w.key("k", 8);
    Writer::put<uint64_t>(w.kv, uint64_t(1) << 60);
    EXPECT_THAT(f.error_of(w.bytes()), HasSubstr("string length"));
  }
  {  // an array length the file cannot hold
    Writer w;
    w.key("arr", 9);
    Writer::put<uint32_t>(w.kv, 4);
    Writer::put<uint64_t>(w.kv, uint64_t(1) << 40);
    EXPECT_THAT(f.error_of(w.bytes()), HasSubstr("cannot fit"));
  }
  {  // a metadata count the file cannot hold
    Writer w = valid();
    w.n_kv = uint64_t(1) << 50;
    EXPECT_THAT(f.error_of(w.bytes()), HasSubstr("metadata count"));
  }
  {
    Writer w = valid();
    w.u32("llama.block_count", 3);
    EXPECT_THAT(f.error_of(w.bytes()), HasSubstr("'llama.block_count' appears twice"));
  }
  {
    Writer w = valid();
    w.tensor("a", {1}, 0, f32_bytes({1}));
    EXPECT_THAT(f.error_of(w.bytes()), HasSubstr("tensor 'a' appears twice"));
  }
  {
    Writer w;
    w.tensor("t", {32}, 99, std::string(64, '\0'));
    EXPECT_THAT(f.error_of(w.bytes()), HasSubstr("tensor 't': unknown ggml type id 99"));
  }
  {
    Writer w;
    w.tensor("t", {1, 1, 1, 1, 1}, 0, f32_bytes({1}));
    EXPECT_THAT(f.error_of(w.bytes()), HasSubstr("n_dims 5"));
  }
  {
    Writer w;
    w.tensor("t", {0}, 0, "");
    EXPECT_THAT(f.error_of(w.bytes()), HasSubstr("is zero"));
  }
  {  // Q4_0 rows must be whole 32-element blocks
    Writer w;
    w.tensor("t", {16}, 2, std::string(18, '\0'));
    EXPECT_THAT(f.error_of(w.bytes()), HasSubstr("not a multiple of the Q4_0 block size 32"));
  }
  {  // data past the end: the tensor claims 8 floats, the file holds 2
    Writer w;
    w.tensor("t", {8}, 0, f32_bytes({1, 2}));
    EXPECT_THAT(f.error_of(w.bytes()), HasSubstr("past its end"));
  }
  {  // a misaligned offset: patch the second tensor's offset from 32 to 4
    Writer w = valid();
    std::string s = w.bytes();
    const size_t at = s.find(std::string("\x01\x00\x00\x00\x00\x00\x00\x00" "b", 9));
    ASSERT_NE(at, std::string::npos);
    const size_t off = at + 9 + 4 + 8 + 4;  // name, n_dims, ne[0], type
    uint64_t four = 4;
    std::memcpy(&s[off], &four, 8);
    EXPECT_THAT(f.error_of(s), HasSubstr("not a multiple of the alignment"));
    uint64_t zero = 0;  // offset 0: overlaps 'a'
    std::memcpy(&s[off], &zero, 8);
    EXPECT_THAT(f.error_of(s), HasSubstr("overlap"));
  }
  {
    Writer w = valid();
    w.u32("general.alignment", 48);
    EXPECT_THAT(f.error_of(w.bytes()), HasSubstr("must be a power of two"));
  }
  {  // arrays nested deeper than 4
    Writer w;
    w.key("deep", 9);
    for (int i = 0; i < 6; ++i) { Writer::put<uint32_t>(w.kv, 9); Writer::put<uint64_t>(w.kv, 1); }
    EXPECT_THAT(f.error_of(w.bytes() + std::string(64, '\0')), HasSubstr("nested more than 4 deep"));
  }
}

TEST(Gguf, NamedPipeIsAnErrorNotAHang) {
  testing::TempDir d;
  const std::string p = d.file("pipe.gguf");
  ASSERT_EQ(::mkfifo(p.c_str(), 0600), 0);
  EXPECT_FALSE(GgufFile::looks_like_gguf(p));
  try {
    GgufFile::open(p);
    ADD_FAILURE() << "a FIFO opened";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("not a regular file"));
  }
}

TEST(Gguf, SmolLM2File) {
  const std::string p = testing::shared_dir() + "/models/smollm2-135m-instruct-q4_1/model.gguf";
  ASSERT_TRUE(GgufFile::looks_like_gguf(p));
  const auto g = GgufFile::open(p);
  EXPECT_EQ(g->version(), 3u);
  EXPECT_EQ(g->get_string("general.architecture"), "llama");
  EXPECT_EQ(g->get_int("llama.block_count"), 30);
  EXPECT_EQ(g->get_string("tokenizer.ggml.model"), "gpt2");
  EXPECT_EQ(g->metadata().at("tokenizer.ggml.tokens").size(), 49152u);
  EXPECT_EQ(g->tensors().size(), 272u);  // README: 210 Q4_1 + 1 Q8_0 + 61 F32
  int q41 = 0, q80 = 0, f32 = 0;
  for (const GgufTensor& t : g->tensors()) {
    q41 += t.type == uint32_t(GgmlType::Q4_1);
    q80 += t.type == uint32_t(GgmlType::Q8_0);
    f32 += t.type == uint32_t(GgmlType::F32);
  }
  EXPECT_EQ(q41, 210);
  EXPECT_EQ(q80, 1);
  EXPECT_EQ(f32, 61);
  const GgufTensor* e = g->find("token_embd.weight");
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->type, uint32_t(GgmlType::Q8_0));
  EXPECT_EQ(e->ne, (std::vector<int64_t>{576, 49152}));
  EXPECT_EQ(ggml_type_name(g->find("blk.0.attn_q.weight")->type), "Q4_1");
}

}  // namespace
}  // namespace sinkq
