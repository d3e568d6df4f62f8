// sinkq/io/gguf.h — validated, memory-mapped reader of GGUF files (llama.cpp's model format), v2/v3.
//
// Layout (little-endian only: this reader runs on little-endian hosts and reads little-endian
// files; a big-endian GGUF file reads as a huge version and is refused by the version check):
//   "GGUF" u32 version  u64 n_tensors  u64 n_kv
//   n_kv ×  { string key; u32 value_type; value }      string = u64 length + bytes (no NUL)
//   n_tensors × { string name; u32 n_dims; u64 ne[n_dims]; u32 ggml_type; u64 offset }
//   padding to `general.alignment` (u32, default 32), then the data section; tensor offsets are
//   relative to it and aligned.
// Value types: 0 u8, 1 i8, 2 u16, 3 i16, 4 u32, 5 i32, 6 f32, 7 bool, 8 string, 9 array
// (u32 element type + u64 count + elements), 10 u64, 11 i64, 12 f64. Version 1 (u32 counts and
// lengths) is refused with a "not supported" error.
//
// The file comes from strangers, so before anything is used: the path is a regular file (a FIFO
// would block), the metadata and tensor counts and every string and array length are checked
// against the bytes left in the file before anything is reserved, arrays nest at most 4 deep,
// value type ids are known, keys are non-empty and unique, tensor names are unique, n_dims is 1..4,
// every dimension is >= 0 with an overflow-checked product (a zero dimension makes an empty tensor,
// as in ggml), the row length is a multiple of the type's block size, the type id is known, the
// alignment is a u32 power of two, and every tensor lies inside the data section (which starts at
// the aligned end of the header), aligned, without overlapping another. Gaps between tensors and
// trailing bytes are tolerated. Every error names the file and the key or tensor at fault.
#pragma once

#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/mmap.h"

namespace sinkq {

// ggml tensor types by their on-disk id (GGML_TYPE_*).
enum class GgmlType : uint32_t {
  F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q8_1 = 9,
  Q2_K = 10, Q3_K = 11, Q4_K = 12, Q5_K = 13, Q6_K = 14, Q8_K = 15,
  IQ2_XXS = 16, IQ2_XS = 17, IQ3_XXS = 18, IQ1_S = 19, IQ4_NL = 20, IQ3_S = 21, IQ2_S = 22,
  IQ4_XS = 23, I8 = 24, I16 = 25, I32 = 26, I64 = 27, F64 = 28, IQ1_M = 29, BF16 = 30,
  TQ1_0 = 34, TQ2_0 = 35, MXFP4 = 39, NVFP4 = 40, Q1_0 = 41, Q2_0 = 42,
  // 4, 5 (Q4_2, Q4_3), 31..33 (Q4_0_4_4..) and 36..38 (IQ4_NL_4_4..) are retired in ggml and
  // unknown here.
};

struct GgmlTypeTraits {
  const char* name;
  int64_t block_elems;  // elements per block (1 for plain types)
  size_t block_bytes;   // bytes per block
};
// nullptr for an id this reader does not know at all.
const GgmlTypeTraits* ggml_type_traits(uint32_t type);
std::string ggml_type_name(uint32_t type);  // "Q4_K", or "type 99" for an unknown id

struct GgufTensor {
  std::string name;
  uint32_t type = 0;               // GgmlType id
  std::vector<int64_t> ne;         // ggml order: ne[0] is the fastest-varying (row length)
  uint64_t offset = 0;             // relative to the data section
  const std::byte* data = nullptr; // into the mapping
  size_t nbytes = 0;
  int64_t numel() const;
  std::string shape_str() const;   // "[576, 49152]" (ggml order)
};

class GgufFile {
 public:
  static std::shared_ptr<GgufFile> open(const std::string& path);
  // A regular file whose first four bytes are "GGUF". Never throws.
  static bool looks_like_gguf(const std::string& path);

  const std::string& path() const { return map_.path(); }
  uint32_t version() const { return version_; }
  size_t alignment() const { return alignment_; }
  // Every key -> value: numbers and booleans as JSON scalars, strings as JSON strings holding the
  // raw bytes (not checked for UTF-8), arrays as JSON arrays (nested arrays too).
  const nlohmann::json& metadata() const { return meta_; }
  uint32_t metadata_type(const std::string& key) const;  // the GGUF value type id (arrays: 9)
  bool has(const std::string& key) const { return meta_.contains(key); }
  // Typed getters; a missing key or a value of another kind is an Error naming the file and key.
  std::string get_string(const std::string& key) const;
  int64_t get_int(const std::string& key) const;   // any integer type
  double get_float(const std::string& key) const;  // f32/f64 (or an integer)
  const std::vector<GgufTensor>& tensors() const { return tensors_; }  // in file order
  const GgufTensor* find(const std::string& name) const;               // nullptr if absent

 private:
  MappedFile map_;
  uint32_t version_ = 0;
  size_t alignment_ = 32;
  nlohmann::json meta_ = nlohmann::json::object();
  std::map<std::string, uint32_t> meta_types_;
  std::vector<GgufTensor> tensors_;
  std::map<std::string, size_t> index_;
};

// A GGUF v3 file with no tensors and the metadata keys of `g` for which keep(key) is true (an
// artifact made from a GGUF model carries its tokenizer this way: tokenizer.gguf). Scalars keep
// their GGUF type; array elements are written as string, i32 (integers), f32 (floats) or bool,
// which is how llama.cpp writes the tokenizer arrays. Keys are written in sorted order.
std::string gguf_metadata_file(const GgufFile& g, bool (*keep)(const std::string& key));

}  // namespace sinkq
