// The GGUF reader (io/gguf.h): files built byte by byte here (a tiny writer below), every
// corruption named, every prefix and byte flip of a valid header refused cleanly, and the real
// SmolLM2 file from ../shared.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstring>
#include <fstream>

#include "core/error.h"
#include "io/gguf.h"
#include "io/weights.h"
#include "util/testutil.h"

namespace sinkq {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

// GGUF value type ids.
enum : uint32_t { U8, I8, U16, I16, U32, I32, F32, BOOL, STRING, ARRAY, U64, I64, F64 };

// A minimal GGUF writer: metadata and tensor infos as raw bytes, then the data section.
struct Writer {
  uint32_t version = 3;
  uint64_t n_tensors = 0, n_kv = 0;
  std::string kv, infos, data;
  size_t align = 32;  // padding used by bytes() and tensor(); general.alignment is separate

  template <class T>
  static void put(std::string& s, T v) { s.append(reinterpret_cast<const char*>(&v), sizeof v); }
  static void str(std::string& s, const std::string& v) { put<uint64_t>(s, v.size()); s += v; }
  void key(const std::string& k, uint32_t type) { str(kv, k); put<uint32_t>(kv, type); ++n_kv; }
  template <class T>
  void scalar(const std::string& k, uint32_t type, T v) { key(k, type); put(kv, v); }
  void string(const std::string& k, const std::string& v) { key(k, STRING); str(kv, v); }
  void strings(const std::string& k, const std::vector<std::string>& v) {
    key(k, ARRAY); put<uint32_t>(kv, STRING); put<uint64_t>(kv, v.size());
    for (const auto& s : v) str(kv, s);
  }
  // The tensor info alone, with an explicit offset (data is the caller's business).
  void info(const std::string& name, std::vector<uint64_t> ne, uint32_t type, uint64_t offset) {
    str(infos, name); put<uint32_t>(infos, uint32_t(ne.size()));
    for (uint64_t d : ne) put(infos, d);
    put(infos, type); put<uint64_t>(infos, offset);
    ++n_tensors;
  }
  // A tensor whose bytes are appended to the data section at the next aligned offset.
  void tensor(const std::string& name, std::vector<uint64_t> ne, uint32_t type, const std::string& bytes) {
    while (data.size() % align) data += '\0';
    info(name, std::move(ne), type, data.size());
    data += bytes;
  }
  size_t header_size() const { return 24 + kv.size() + infos.size(); }
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
  std::string write(const std::string& bytes, const std::string& name = "m.gguf") {
    const std::string p = d.file(name);
    std::ofstream(p, std::ios::binary | std::ios::trunc).write(bytes.data(), std::streamsize(bytes.size()));
    return p;
  }
  // The message of the sinkq::Error that opening `bytes` throws ("(no error)" if it opens). Any
  // other exception type escapes and fails the test.
  std::string error_of(const std::string& bytes) {
    try {
      GgufFile::open(write(bytes));
    } catch (const Error& e) {
      return e.what();
    }
    return "(no error)";
  }
};


// Every scalar type, strings with arbitrary bytes, a string array, a nested array, three tensors.
Writer valid() {
  Writer w;
  w.string("general.architecture", "llama");
  w.scalar<uint32_t>("llama.block_count", U32, 2);
  w.scalar<uint8_t>("u8", U8, 200);
  w.scalar<int8_t>("i8", I8, -100);
  w.scalar<uint16_t>("u16", U16, 60000);
  w.scalar<int16_t>("i16", I16, -30000);
  w.scalar<int32_t>("i32", I32, -7);
  w.scalar<float>("llama.attention.layer_norm_rms_epsilon", F32, 1e-5f);
  w.scalar<uint8_t>("tokenizer.ggml.add_bos_token", BOOL, 1);
  w.scalar<uint8_t>("false", BOOL, 0);
  w.scalar<uint64_t>("u64", U64, 1ull << 40);
  w.scalar<int64_t>("i64", I64, -(int64_t(1) << 50));
  w.scalar<double>("f64", F64, 0.25);
  w.string("raw", std::string("\xff\xfe\0x", 4));  // not UTF-8, with a NUL: kept byte for byte
  w.strings("tokenizer.ggml.tokens", {"<s>", "a", "\xe2\x96\x81" "b", ""});
  {  // [[1, 2], [3], []] as an array of i32 arrays
    w.key("nested", ARRAY);
    Writer::put<uint32_t>(w.kv, ARRAY); Writer::put<uint64_t>(w.kv, 3);
    Writer::put<uint32_t>(w.kv, I32); Writer::put<uint64_t>(w.kv, 2);
    Writer::put<int32_t>(w.kv, 1); Writer::put<int32_t>(w.kv, 2);
    Writer::put<uint32_t>(w.kv, I32); Writer::put<uint64_t>(w.kv, 1); Writer::put<int32_t>(w.kv, 3);
    Writer::put<uint32_t>(w.kv, I32); Writer::put<uint64_t>(w.kv, 0);
  }
  w.tensor("a", {4, 2}, 0, f32_bytes({1, 2, 3, 4, 5, 6, 7, 8}));
  w.tensor("b", {3}, 0, f32_bytes({-1, -2, -3}));
  std::string q4_1(80, '\0');  // Q4_1 [64, 2]: 4 blocks of 20 bytes
  for (size_t i = 0; i < q4_1.size(); ++i) q4_1[i] = char(i);
  w.tensor("q", {64, 2}, uint32_t(GgmlType::Q4_1), q4_1);
  return w;
}

// Byte offset, in the file, of the u64 `offset` field of the tensor info named `name`.
size_t offset_field(const Writer& w, const std::string& name, size_t n_dims) {
  std::string needle;
  Writer::str(needle, name);
  const size_t at = w.infos.find(needle);
  SINKQ_ASSERT(at != std::string::npos);
  return 24 + w.kv.size() + at + needle.size() + 4 + 8 * n_dims + 4;
}

std::string with_u64_at(std::string s, size_t at, uint64_t v) {
  std::memcpy(&s[at], &v, 8);
  return s;
}

TEST(GgufTypes, TraitsAndNames) {
  const GgmlTypeTraits* q4k = ggml_type_traits(uint32_t(GgmlType::Q4_K));
  ASSERT_NE(q4k, nullptr);
  EXPECT_STREQ(q4k->name, "Q4_K");
  EXPECT_EQ(q4k->block_elems, 256);
  EXPECT_EQ(q4k->block_bytes, 144u);
  EXPECT_EQ(ggml_type_traits(uint32_t(GgmlType::Q8_0))->block_bytes, 34u);
  EXPECT_EQ(ggml_type_traits(uint32_t(GgmlType::Q4_1))->block_bytes, 20u);
  EXPECT_EQ(ggml_type_traits(uint32_t(GgmlType::Q6_K))->block_bytes, 210u);
  EXPECT_EQ(ggml_type_traits(uint32_t(GgmlType::F32))->block_bytes, 4u);
  EXPECT_EQ(ggml_type_name(30), "BF16");
  EXPECT_EQ(ggml_type_name(uint32_t(GgmlType::IQ4_XS)), "IQ4_XS");
  EXPECT_EQ(ggml_type_traits(4), nullptr);   // Q4_2: retired
  EXPECT_EQ(ggml_type_traits(31), nullptr);  // Q4_0_4_4: retired
  EXPECT_EQ(ggml_type_traits(99), nullptr);
  EXPECT_EQ(ggml_type_name(99), "type 99");
}

TEST(Gguf, ReadsEveryMetadataType) {
  Files f;
  const auto g = GgufFile::open(f.write(valid().bytes()));
  EXPECT_EQ(g->version(), 3u);
  EXPECT_EQ(g->alignment(), 32u);
  EXPECT_EQ(g->metadata().size(), 16u);
  EXPECT_EQ(g->get_string("general.architecture"), "llama");
  EXPECT_EQ(g->get_int("llama.block_count"), 2);
  EXPECT_EQ(g->get_int("u8"), 200);
  EXPECT_EQ(g->get_int("i8"), -100);
  EXPECT_EQ(g->get_int("u16"), 60000);
  EXPECT_EQ(g->get_int("i16"), -30000);
  EXPECT_EQ(g->get_int("i32"), -7);
  EXPECT_EQ(g->get_int("u64"), int64_t(1) << 40);
  EXPECT_EQ(g->get_int("i64"), -(int64_t(1) << 50));
  EXPECT_EQ(float(g->get_float("llama.attention.layer_norm_rms_epsilon")), 1e-5f);
  EXPECT_EQ(g->get_float("f64"), 0.25);
  EXPECT_EQ(g->get_float("i32"), -7.0);  // integers read as floats too
  EXPECT_EQ(g->metadata().at("tokenizer.ggml.add_bos_token"), true);
  EXPECT_EQ(g->metadata().at("false"), false);
  EXPECT_EQ(g->get_string("raw"), std::string("\xff\xfe\0x", 4));
  const nlohmann::json& tokens = g->metadata().at("tokenizer.ggml.tokens");
  ASSERT_TRUE(tokens.is_array());
  EXPECT_EQ(tokens.size(), 4u);
  EXPECT_EQ(tokens[2].get<std::string>(), "\xe2\x96\x81" "b");
  EXPECT_EQ(tokens[3].get<std::string>(), "");
  EXPECT_EQ(g->metadata().at("nested"), nlohmann::json::parse("[[1, 2], [3], []]"));
  const std::pair<const char*, uint32_t> types[] = {
      {"u8", U8},   {"i8", I8},   {"u16", U16}, {"i16", I16}, {"i32", I32}, {"llama.block_count", U32},
      {"llama.attention.layer_norm_rms_epsilon", F32}, {"false", BOOL}, {"raw", STRING},
      {"tokenizer.ggml.tokens", ARRAY}, {"nested", ARRAY}, {"u64", U64}, {"i64", I64}, {"f64", F64}};
  for (const auto& [k, t] : types) EXPECT_EQ(g->metadata_type(k), t) << k;
  EXPECT_TRUE(g->has("nested"));
  EXPECT_FALSE(g->has("nope"));

  // Typed getters name the file and the key.
  const std::string p = g->path();
  EXPECT_THAT(testing::error_of([&] { g->get_int("general.architecture"); }),
              AllOf(HasSubstr(p), HasSubstr("'general.architecture' must be an integer, is a string")));
  EXPECT_THAT(testing::error_of([&] { g->get_int("f64"); }), HasSubstr("'f64' must be an integer"));
  EXPECT_THAT(testing::error_of([&] { g->get_int("false"); }), HasSubstr("'false' must be an integer, is a bool"));
  EXPECT_THAT(testing::error_of([&] { g->get_float("raw"); }), HasSubstr("'raw' must be a number"));
  EXPECT_THAT(testing::error_of([&] { g->get_string("u8"); }), HasSubstr("'u8' must be a string, is a u8"));
  EXPECT_THAT(testing::error_of([&] { g->get_string("nested"); }), HasSubstr("'nested' must be a string, is a array"));
  EXPECT_THAT(testing::error_of([&] { g->get_string("nope"); }), AllOf(HasSubstr(p), HasSubstr("'nope' is missing")));
  EXPECT_THAT(testing::error_of([&] { g->get_int("nope"); }), HasSubstr("'nope' is missing"));
  EXPECT_THAT(testing::error_of([&] { g->get_float("nope"); }), HasSubstr("'nope' is missing"));
}

TEST(Gguf, TensorsOffsetsAndData) {
  Files f;
  const Writer w = valid();
  const auto g = GgufFile::open(f.write(w.bytes()));
  ASSERT_EQ(g->tensors().size(), 3u);
  EXPECT_EQ(g->tensors()[0].name, "a");  // file order
  EXPECT_EQ(g->tensors()[1].name, "b");
  EXPECT_EQ(g->tensors()[2].name, "q");
  const GgufTensor* a = g->find("a");
  const GgufTensor* b = g->find("b");
  const GgufTensor* q = g->find("q");
  ASSERT_TRUE(a && b && q);
  EXPECT_EQ(g->find("c"), nullptr);
  EXPECT_EQ(a->ne, (std::vector<int64_t>{4, 2}));
  EXPECT_EQ(a->shape_str(), "[4, 2]");
  EXPECT_EQ(a->numel(), 8);
  EXPECT_EQ(a->type, 0u);
  EXPECT_EQ(a->offset, 0u);
  EXPECT_EQ(a->nbytes, 32u);
  EXPECT_EQ(b->offset, 32u);  // aligned after a's 32 bytes
  EXPECT_EQ(b->nbytes, 12u);
  EXPECT_EQ(q->offset, 64u);  // 32 + 12 rounded up to 32
  EXPECT_EQ(q->nbytes, 80u);
  EXPECT_EQ(q->type, uint32_t(GgmlType::Q4_1));
  EXPECT_EQ(q->numel(), 128);
  // The data section starts at the aligned end of the header; the mapping is page-aligned, so
  // every tensor pointer is 32-byte aligned, and the pointers are offset apart.
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a->data) % 32, 0u);
  EXPECT_EQ(b->data - a->data, 32);
  EXPECT_EQ(q->data - a->data, 64);
  float v[8];
  std::memcpy(v, a->data, 32);
  EXPECT_EQ(v[0], 1.0f);
  EXPECT_EQ(v[7], 8.0f);
  std::memcpy(v, b->data, 12);
  EXPECT_EQ(v[2], -3.0f);
  EXPECT_EQ(std::memcmp(q->data, w.data.data() + 64, 80), 0);
  // data section start = header rounded up to 32
  const size_t data_start = (w.header_size() + 31) / 32 * 32;
  EXPECT_EQ(w.bytes().size(), data_start + w.data.size());
}

TEST(Gguf, VersionTwoAndCustomAlignment) {
  Files f;
  Writer w;
  w.version = 2;
  w.align = 64;
  w.scalar<uint32_t>("general.alignment", U32, 64);
  w.tensor("a", {4, 2}, 0, f32_bytes({1, 2, 3, 4, 5, 6, 7, 8}));
  w.tensor("b", {3}, 0, f32_bytes({-1, -2, -3}));
  const auto g = GgufFile::open(f.write(w.bytes()));
  EXPECT_EQ(g->version(), 2u);
  EXPECT_EQ(g->alignment(), 64u);
  EXPECT_EQ(g->find("b")->offset, 64u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(g->find("a")->data) % 64, 0u);
  EXPECT_EQ(g->find("b")->data - g->find("a")->data, 64);
  float v;
  std::memcpy(&v, g->find("b")->data, 4);
  EXPECT_EQ(v, -1.0f);
  // With general.alignment = 64 an offset that is only 32-aligned is refused.
  Writer w2 = w;
  w2.infos.clear();
  w2.n_tensors = 0;
  w2.info("a", {4, 2}, 0, 0);
  w2.info("b", {3}, 0, 32);
  EXPECT_THAT(Files().error_of(w2.bytes()),
              HasSubstr("tensor 'b': offset 32 is not a multiple of the alignment 64"));
}

TEST(Gguf, TensorlessFileAndEmptyTensor) {
  Files f;
  Writer w;  // no tensors, no padding needed after the header
  w.string("general.architecture", "llama");
  std::string s = "GGUF";
  Writer::put<uint32_t>(s, 3); Writer::put<uint64_t>(s, 0); Writer::put<uint64_t>(s, 1);
  const auto g = GgufFile::open(f.write(s + w.kv));
  EXPECT_TRUE(g->tensors().empty());
  EXPECT_EQ(g->get_string("general.architecture"), "llama");

  Writer e;  // a zero dimension is an empty tensor (ggml allows it): no bytes, overlaps nothing
  e.tensor("a", {4}, 0, f32_bytes({1, 2, 3, 4}));
  e.info("empty", {0, 4}, 0, 0);
  const auto ge = GgufFile::open(f.write(e.bytes()));
  EXPECT_EQ(ge->find("empty")->numel(), 0);
  EXPECT_EQ(ge->find("empty")->nbytes, 0u);
}

TEST(Gguf, EveryCorruptionIsNamed) {
  Files f;
  const Writer v = valid();
  const std::string good = v.bytes();
  ASSERT_EQ(f.error_of(good), "(no error)");
  const std::string p = f.d.file("m.gguf");

  // Header: magic, version, counts.
  EXPECT_THAT(f.error_of("GGUX" + good.substr(4)), AllOf(HasSubstr(p), HasSubstr("not a GGUF file")));
  EXPECT_THAT(f.error_of("GGU"), HasSubstr("truncated file: the magic"));
  EXPECT_THAT(f.error_of(""), HasSubstr("truncated file"));
  EXPECT_THAT(f.error_of(good.substr(0, 6)), HasSubstr("truncated file: the version"));
  for (uint32_t version : {1u, 4u, 0x03000000u}) {
    Writer w = v;
    w.version = version;
    EXPECT_THAT(f.error_of(w.bytes()), HasSubstr(fmt::format("GGUF version {} is not supported", version)));
  }
  EXPECT_THAT(f.error_of(good.substr(0, 12)), HasSubstr("truncated file: the tensor count"));
  EXPECT_THAT(f.error_of(good.substr(0, 30)), HasSubstr("metadata count 16 cannot fit in a 30-byte file"));
  {
    Writer w = v;
    w.n_kv = uint64_t(1) << 50;
    EXPECT_THAT(f.error_of(w.bytes()), HasSubstr("metadata count 1125899906842624 cannot fit"));
  }
  {
    Writer w = v;
    w.n_tensors = uint64_t(1) << 40;
    EXPECT_THAT(f.error_of(w.bytes()), HasSubstr("tensor count 1099511627776 cannot fit"));
  }
  {  // the header cut inside the last tensor info: named field
    EXPECT_THAT(f.error_of(good.substr(0, v.header_size() - 3)), HasSubstr("truncated file: tensor 'q' (offset)"));
    Writer w;  // a 57-byte header: the data section would start at 64
    w.tensor("t", {1}, 0, f32_bytes({1}));
    EXPECT_THAT(f.error_of(w.bytes().substr(0, w.header_size())),
                HasSubstr("the data section would start at byte 64, past the end of the 57-byte file"));
  }

  // Metadata.
  {  // a string length far past the end
    Writer w;
    w.key("k", STRING);
    Writer::put<uint64_t>(w.kv, uint64_t(1) << 60);
    EXPECT_THAT(f.error_of(w.bytes()), HasSubstr("metadata 'k': string length 1152921504606846976 runs past the end"));
  }
  {  // a key length far past the end
    Writer w;
    Writer::put<uint64_t>(w.kv, ~uint64_t(0));
    Writer::put<uint64_t>(w.kv, 0);
    w.n_kv = 1;
    EXPECT_THAT(f.error_of(w.bytes()), HasSubstr("metadata key #0: string length"));
  }
  {  // an array length the file cannot hold
    Writer w;
    w.key("arr", ARRAY);
    Writer::put<uint32_t>(w.kv, U32);
    Writer::put<uint64_t>(w.kv, uint64_t(1) << 40);
    EXPECT_THAT(f.error_of(w.bytes()), HasSubstr("metadata 'arr': array of 1099511627776 u32 elements cannot fit"));
  }
  {  // a string array whose length headers alone could not fit
    Writer w;
    w.key("strs", ARRAY);
    Writer::put<uint32_t>(w.kv, STRING);
    Writer::put<uint64_t>(w.kv, 100);
    EXPECT_THAT(f.error_of(w.bytes() + std::string(200, '\0')), HasSubstr("metadata 'strs': array of 100 string elements cannot fit"));
  }
  {  // a string inside an array running past the end
    Writer w;
    w.key("strs", ARRAY);
    Writer::put<uint32_t>(w.kv, STRING);
    Writer::put<uint64_t>(w.kv, 2);
    Writer::put<uint64_t>(w.kv, 1000);
    EXPECT_THAT(f.error_of(w.bytes() + std::string(64, '\0')), HasSubstr("metadata 'strs': string length 1000 runs past"));
  }
  {  // arrays nested deeper than 4
    Writer w;
    w.key("deep", ARRAY);
    for (int i = 0; i < 6; ++i) { Writer::put<uint32_t>(w.kv, ARRAY); Writer::put<uint64_t>(w.kv, 1); }
    EXPECT_THAT(f.error_of(w.bytes() + std::string(64, '\0')), HasSubstr("metadata 'deep': arrays nested more than 4 deep"));
  }
  {
    Writer w;
    w.key("k", 13);
    Writer::put<uint64_t>(w.kv, 0);
    EXPECT_THAT(f.error_of(w.bytes()), HasSubstr("metadata 'k': unknown value type 13"));
  }
  {
    Writer w;
    w.key("k", ARRAY);
    Writer::put<uint32_t>(w.kv, 77);
    Writer::put<uint64_t>(w.kv, 0);
    EXPECT_THAT(f.error_of(w.bytes()), HasSubstr("metadata 'k': unknown array element type 77"));
  }
  {
    Writer w = v;
    w.scalar<uint32_t>("llama.block_count", U32, 3);
    EXPECT_THAT(f.error_of(w.bytes()), HasSubstr("metadata key 'llama.block_count' appears twice"));
  }
  {
    Writer w;
    w.scalar<uint32_t>("", U32, 3);
    EXPECT_THAT(f.error_of(w.bytes()), HasSubstr("metadata key #0 is empty"));
  }
  for (uint32_t a : {48u, 0u, 3u}) {
    Writer w = v;
    w.scalar<uint32_t>("general.alignment", U32, a);
    EXPECT_THAT(f.error_of(w.bytes()),
                HasSubstr(fmt::format("metadata 'general.alignment' = {} must be a power of two", a)));
  }
  {
    Writer w = v;
    w.scalar<int32_t>("general.alignment", I32, 32);
    EXPECT_THAT(f.error_of(w.bytes()), HasSubstr("'general.alignment' must be a u32, is a i32"));
  }

  // Tensor infos.
  {
    Writer w = v;
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
    w.tensor("t", {32}, 4, std::string(64, '\0'));  // Q4_2, retired
    EXPECT_THAT(f.error_of(w.bytes()), HasSubstr("tensor 't': unknown ggml type id 4"));
  }
  {
    Writer w;
    w.tensor("t", {1, 1, 1, 1, 1}, 0, f32_bytes({1}));
    EXPECT_THAT(f.error_of(w.bytes()), HasSubstr("tensor 't': n_dims 5 (expected 1 to 4)"));
  }
  {
    Writer w;
    w.info("t", {}, 0, 0);
    EXPECT_THAT(f.error_of(w.bytes() + std::string(64, '\0')), HasSubstr("tensor 't': n_dims 0"));
  }
  {
    Writer w;
    w.info("t", {4, uint64_t(1) << 63}, 0, 0);
    EXPECT_THAT(f.error_of(w.bytes() + std::string(64, '\0')), HasSubstr("tensor 't': ne[1] = -9223372036854775808 is negative"));
  }
  {
    Writer w;
    w.info("t", {uint64_t(1) << 32, uint64_t(1) << 32}, 0, 0);
    EXPECT_THAT(f.error_of(w.bytes() + std::string(64, '\0')), HasSubstr("tensor 't': the element count of shape [4294967296, 4294967296] overflows"));
  }
  {  // a partial product past int64 is refused even when a later zero makes the total 0
    Writer w;
    w.info("t", {uint64_t(1) << 62, 2, 0}, 0, 0);
    EXPECT_THAT(f.error_of(w.bytes() + std::string(64, '\0')), HasSubstr("tensor 't': the element count of shape [4611686018427387904, 2, 0] overflows"));
  }
  {  // Q4_0 rows must be whole 32-element blocks
    Writer w;
    w.tensor("t", {16}, 2, std::string(18, '\0'));
    EXPECT_THAT(f.error_of(w.bytes()), HasSubstr("tensor 't': row length 16 is not a multiple of the Q4_0 block size 32"));
  }
  {
    Writer w;
    w.tensor("", {1}, 0, f32_bytes({1}));
    EXPECT_THAT(f.error_of(w.bytes()), HasSubstr("tensor #0 has an empty name"));
  }

  // Placement in the data section.
  {  // data past the end: the tensor claims 8 floats, the file holds 2
    Writer w;
    w.tensor("t", {8}, 0, f32_bytes({1, 2}));
    EXPECT_THAT(f.error_of(w.bytes()), HasSubstr("tensor 't': bytes [0, 32) of the data section lie past its end (8 bytes)"));
  }
  const size_t b_off = offset_field(v, "b", 1);
  EXPECT_THAT(f.error_of(with_u64_at(good, b_off, 4)), HasSubstr("tensor 'b': offset 4 is not a multiple of the alignment 32"));
  EXPECT_THAT(f.error_of(with_u64_at(good, b_off, 4096)), HasSubstr("tensor 'b': bytes [4096, 4108) of the data section lie past its end"));
  EXPECT_THAT(f.error_of(with_u64_at(good, b_off, uint64_t(-32))), HasSubstr("tensor 'b': bytes"));
  EXPECT_THAT(f.error_of(with_u64_at(good, b_off, 0)), AllOf(HasSubstr("'a' [0, 32)"), HasSubstr("'b' [0, 12)"), HasSubstr("overlap")));
  {  // 'q' (80 bytes at 64) overlapping 'b' placed at 128
    EXPECT_THAT(f.error_of(with_u64_at(good, b_off, 128)), AllOf(HasSubstr("tensors 'q' [64, 144) and 'b' [128, 140) overlap")));
  }

  EXPECT_THAT(f.error_of(good.substr(0, good.size() - 1)), HasSubstr("tensor 'q': bytes [64, 144) of the data section lie past its end"));
}

// Every prefix of a valid file, and every header byte set to 0x00, 0x80 or 0xff, either opens or
// throws sinkq::Error: no crash, no other exception (bad_alloc, length_error), no hang.
TEST(Gguf, PrefixesAndByteFlipsAreRefusedCleanly) {
  Files f;
  const Writer v = valid();
  const std::string good = v.bytes();
  for (size_t n = 0; n < good.size(); ++n)
    EXPECT_NE(f.error_of(good.substr(0, n)), "(no error)") << "prefix of " << n << " bytes opened";
  int opened = 0, refused = 0;
  for (size_t i = 0; i < v.header_size(); ++i)
    for (char c : {'\x00', '\x80', '\xff'}) {
      if (good[i] == c) continue;
      std::string s = good;
      s[i] = c;
      (f.error_of(s) == "(no error)" ? opened : refused)++;
    }
  EXPECT_GT(refused, 0);
  EXPECT_GT(opened, 0);  // value bytes (e.g. the f64) can change freely
}

TEST(Gguf, NotARegularFileIsAnErrorNotAHang) {
  testing::TempDir d;
  const std::string p = d.file("pipe.gguf");
  ASSERT_EQ(::mkfifo(p.c_str(), 0600), 0);
  EXPECT_FALSE(GgufFile::looks_like_gguf(p));
  EXPECT_THAT(testing::error_of([&] { GgufFile::open(p); }), AllOf(HasSubstr(p), HasSubstr("not a regular file")));
  EXPECT_THAT(testing::error_of([&] { GgufFile::open(d.file("")); }), HasSubstr("not a regular file"));  // a directory
  EXPECT_THAT(testing::error_of([&] { GgufFile::open(d.file("missing.gguf")); }), HasSubstr("missing.gguf"));
  EXPECT_FALSE(GgufFile::looks_like_gguf(d.file("missing.gguf")));
  EXPECT_FALSE(GgufFile::looks_like_gguf(d.file("")));
  Files f;
  EXPECT_FALSE(GgufFile::looks_like_gguf(f.write("GGU", "short")));
  EXPECT_FALSE(GgufFile::looks_like_gguf(f.write("{\"a\": 1}", "config.json")));
  EXPECT_TRUE(GgufFile::looks_like_gguf(f.write(valid().bytes())));
}

TEST(Gguf, SmolLM2File) {
  const std::string p = SINKQ_SHARED_DIR "/models/smollm2-135m-instruct-q4_1/model.gguf";
  ASSERT_TRUE(GgufFile::looks_like_gguf(p));
  const auto g = GgufFile::open(p);
  EXPECT_EQ(g->version(), 3u);
  EXPECT_EQ(g->alignment(), 32u);
  EXPECT_EQ(g->get_string("general.architecture"), "llama");
  EXPECT_EQ(g->get_int("llama.block_count"), 30);
  EXPECT_EQ(g->get_string("tokenizer.ggml.model"), "gpt2");
  EXPECT_EQ(g->metadata_type("tokenizer.ggml.tokens"), ARRAY);
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
  EXPECT_EQ(e->shape_str(), "[576, 49152]");
  EXPECT_EQ(e->nbytes, size_t(576 / 32 * 34) * 49152);
  const GgufTensor* q = g->find("blk.0.attn_q.weight");
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(ggml_type_name(q->type), "Q4_1");
}

}  // namespace
}  // namespace sinkq

namespace sinkq {
namespace {

// A one-layer llama GGUF whose metadata counts can be set: each count a model is sized by is
// checked against the tensors in the file before anything is allocated, and the error names the
// key (a block_count of 10^9 was a bare "out of memory": ~10^11 bytes of layer structs).
std::string tiny_llama(uint64_t blocks, uint64_t ctx, uint64_t ffn = 8) {
  Writer w;
  w.string("general.architecture", "llama");
  w.scalar<uint64_t>("llama.block_count", U64, blocks);
  w.scalar<uint64_t>("llama.context_length", U64, ctx);
  w.scalar<uint32_t>("llama.embedding_length", U32, 4);
  w.scalar<uint64_t>("llama.feed_forward_length", U64, ffn);
  w.scalar<uint32_t>("llama.attention.head_count", U32, 2);
  w.scalar<float>("llama.attention.layer_norm_rms_epsilon", F32, 1e-5f);
  auto t = [&](const std::string& name, std::vector<uint64_t> ne) {
    uint64_t n = 1;
    for (uint64_t d : ne) n *= d;
    w.tensor(name, ne, 0, f32_bytes(std::vector<float>(n, 0.5f)));
  };
  t("token_embd.weight", {4, 16});
  t("output_norm.weight", {4});
  t("blk.0.attn_norm.weight", {4});
  t("blk.0.ffn_norm.weight", {4});
  for (const char* n : {"attn_q", "attn_k", "attn_v", "attn_output"}) t(std::string("blk.0.") + n + ".weight", {4, 4});
  t("blk.0.ffn_gate.weight", {4, 8});
  t("blk.0.ffn_up.weight", {4, 8});
  t("blk.0.ffn_down.weight", {8, 4});
  return w.bytes();
}

TEST(GgufModel, CountsAreCheckedAgainstTheFileBeforeAllocating) {
  Files f;
  auto err = [&](const std::string& bytes) { return testing::error_of([&] { ModelFiles::load_gguf(f.write(bytes)); }); };
  EXPECT_NO_THROW(ModelFiles::load_gguf(f.write(tiny_llama(1, 64))));  // the sane file loads
  EXPECT_THAT(err(tiny_llama(1'000'000'000, 64)),
              AllOf(HasSubstr("llama.block_count = 1000000000"), HasSubstr("tensors of 1 layer")));
  EXPECT_THAT(err(tiny_llama(2, 64)), HasSubstr("llama.block_count = 2"));
  EXPECT_THAT(err(tiny_llama(uint64_t(1) << 62, 64)), HasSubstr("llama.block_count"));
  EXPECT_THAT(err(tiny_llama(1, uint64_t(1) << 40)), HasSubstr("llama.context_length"));
  EXPECT_THAT(err(tiny_llama(1, 64, uint64_t(1) << 40)), HasSubstr("feed_forward_length"));
}

}  // namespace
}  // namespace sinkq
