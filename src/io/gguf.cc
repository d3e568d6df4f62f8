// sinkq/io/gguf.cc — the GGUF reader (layout and checks: io/gguf.h).
#include "io/gguf.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <limits>
#include <tuple>

#include "core/error.h"

namespace sinkq {

using json = nlohmann::json;

// Values are memcpy'd from the file as they lie: GGUF is read on little-endian hosts only.
static_assert(std::endian::native == std::endian::little, "the GGUF reader assumes a little-endian host");

namespace {

struct TypeRow {
  uint32_t id;
  GgmlTypeTraits t;
};

// Block sizes from ggml's type table (ggml.c type_traits, block structs in ggml-common.h): 32
// elements for the legacy quants, 256 for the K-quants and most IQ types. Ids that ggml has retired
// (4, 5: Q4_2/Q4_3; 31–33, 36–38: the repacked variants) are unknown here.
constexpr TypeRow kTypes[] = {
    {0, {"F32", 1, 4}},        {1, {"F16", 1, 2}},         {2, {"Q4_0", 32, 18}},     {3, {"Q4_1", 32, 20}},
    {6, {"Q5_0", 32, 22}},     {7, {"Q5_1", 32, 24}},      {8, {"Q8_0", 32, 34}},     {9, {"Q8_1", 32, 36}},
    {10, {"Q2_K", 256, 84}},   {11, {"Q3_K", 256, 110}},   {12, {"Q4_K", 256, 144}},  {13, {"Q5_K", 256, 176}},
    {14, {"Q6_K", 256, 210}},  {15, {"Q8_K", 256, 292}},   {16, {"IQ2_XXS", 256, 66}}, {17, {"IQ2_XS", 256, 74}},
    {18, {"IQ3_XXS", 256, 98}}, {19, {"IQ1_S", 256, 50}},  {20, {"IQ4_NL", 32, 18}},  {21, {"IQ3_S", 256, 110}},
    {22, {"IQ2_S", 256, 82}},  {23, {"IQ4_XS", 256, 136}}, {24, {"I8", 1, 1}},        {25, {"I16", 1, 2}},
    {26, {"I32", 1, 4}},       {27, {"I64", 1, 8}},        {28, {"F64", 1, 8}},       {29, {"IQ1_M", 256, 56}},
    {30, {"BF16", 1, 2}},      {34, {"TQ1_0", 256, 54}},   {35, {"TQ2_0", 256, 66}},  {39, {"MXFP4", 32, 17}},
    {40, {"NVFP4", 64, 36}},   {41, {"Q1_0", 128, 18}},    {42, {"Q2_0", 64, 18}},
};

enum : uint32_t { kU8, kI8, kU16, kI16, kU32, kI32, kF32, kBool, kString, kArray, kU64, kI64, kF64, kNumValueTypes };
constexpr const char* kValueTypeNames[] = {"u8", "i8", "u16", "i16", "u32", "i32", "f32",
                                           "bool", "string", "array", "u64", "i64", "f64"};
constexpr size_t kScalarSize[] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
constexpr int kMaxArrayDepth = 4;
// Capacity reserved up front for an array or the tensor list: a count that passed the bytes-left
// check can still be ~16x larger in memory (a JSON value per u8), so larger containers grow as
// their elements are actually read.
constexpr uint64_t kMaxReserve = 1 << 16;

// Sequential little-endian reader over the mapping; every read is bounds-checked and an
// overrun names what was being read.
class Cursor {
 public:
  Cursor(const uint8_t* p, size_t n, const std::string& path) : p_(p), n_(n), path_(path) {}
  size_t pos() const { return pos_; }
  size_t left() const { return n_ - pos_; }

  template <class T>
  T read(const std::string& what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, p_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  std::string string(const std::string& what) {
    const uint64_t len = read<uint64_t>(what + " (length)");
    if (len > left())
      fail("{}: {}: string length {} runs past the end of the file ({} bytes left)", path_, what, len, left());
    std::string s(reinterpret_cast<const char*>(p_ + pos_), size_t(len));
    pos_ += size_t(len);
    return s;
  }
  void need(size_t k, const std::string& what) const {
    if (k > left()) fail("{}: truncated file: {} needs {} bytes at offset {}, {} left", path_, what, k, pos_, left());
  }

 private:
  const uint8_t* p_;
  size_t n_, pos_ = 0;
  const std::string& path_;
};

json read_scalar(Cursor& c, uint32_t type, const std::string& what) {
  switch (type) {
    case kU8: return c.read<uint8_t>(what);
    case kI8: return c.read<int8_t>(what);
    case kU16: return c.read<uint16_t>(what);
    case kI16: return c.read<int16_t>(what);
    case kU32: return c.read<uint32_t>(what);
    case kI32: return c.read<int32_t>(what);
    case kF32: return double(c.read<float>(what));
    case kBool: {
      const uint8_t b = c.read<uint8_t>(what);
      return b != 0;
    }
    case kString: return c.string(what);
    case kU64: return c.read<uint64_t>(what);
    case kI64: return c.read<int64_t>(what);
    case kF64: return c.read<double>(what);
  }
  SINKQ_ASSERT(false);
}

json read_value(Cursor& c, uint32_t type, const std::string& path, const std::string& what, int depth) {
  if (type >= kNumValueTypes) fail("{}: {}: unknown value type {}", path, what, type);
  if (type != kArray) return read_scalar(c, type, what);
  if (depth >= kMaxArrayDepth) fail("{}: {}: arrays nested more than {} deep", path, what, kMaxArrayDepth);
  const uint32_t et = c.read<uint32_t>(what + " (array element type)");
  if (et >= kNumValueTypes) fail("{}: {}: unknown array element type {}", path, what, et);
  const uint64_t n = c.read<uint64_t>(what + " (array length)");
  // Every element takes at least its scalar size (strings and arrays at least their 8- or 12-byte
  // headers): a count the rest of the file cannot hold is refused before anything is reserved.
  const size_t min_elem = et == kString ? 8 : et == kArray ? 12 : kScalarSize[et];
  if (n > c.left() / min_elem)
    fail("{}: {}: array of {} {} elements cannot fit in the {} bytes left in the file", path, what, n,
         kValueTypeNames[et], c.left());
  json arr = json::array();
  arr.get_ref<json::array_t&>().reserve(size_t(std::min(n, kMaxReserve)));
  for (uint64_t i = 0; i < n; ++i) arr.push_back(read_value(c, et, path, what, depth + 1));
  return arr;
}

}  // namespace

const GgmlTypeTraits* ggml_type_traits(uint32_t type) {
  for (const TypeRow& r : kTypes)
    if (r.id == type) return &r.t;
  return nullptr;
}

std::string ggml_type_name(uint32_t type) {
  const GgmlTypeTraits* t = ggml_type_traits(type);
  return t ? t->name : fmt::format("type {}", type);
}

int64_t GgufTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : ne) n *= d;
  return n;
}

std::string GgufTensor::shape_str() const { return fmt::format("[{}]", fmt::join(ne, ", ")); }

bool GgufFile::looks_like_gguf(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return false;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return false;
  char magic[4] = {};
  const bool ok = ::read(fd, magic, 4) == 4 && std::memcmp(magic, "GGUF", 4) == 0;
  ::close(fd);
  return ok;
}

std::shared_ptr<GgufFile> GgufFile::open(const std::string& path) {
  // Refuse a FIFO, device or directory before opening it (MappedFile checks again on the open
  // descriptor, which is opened non-blocking, so a file swapped in between cannot hang us either).
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) fail("cannot open '{}': {}", path, std::strerror(errno));
  if (!S_ISREG(st.st_mode)) fail("'{}' is not a regular file (a GGUF model must be one)", path);
  auto g = std::make_shared<GgufFile>();
  g->map_ = MappedFile::open(path);
  const std::string& P = g->map_.path();
  Cursor c(g->map_.data(), g->map_.size(), P);
  c.need(4, "the magic");
  if (std::memcmp(g->map_.data(), "GGUF", 4) != 0) fail("{}: not a GGUF file (the first 4 bytes are not \"GGUF\")", P);
  c.read<uint32_t>("the magic");
  g->version_ = c.read<uint32_t>("the version");
  if (g->version_ == 1) fail("{}: GGUF version 1 is not supported (versions 2 and 3 are)", P);
  if (g->version_ != 2 && g->version_ != 3)
    fail("{}: GGUF version {} is not supported (versions 2 and 3 are; a big-endian file reads as a huge "
         "version)", P, g->version_);
  const uint64_t n_tensors = c.read<uint64_t>("the tensor count");
  const uint64_t n_kv = c.read<uint64_t>("the metadata count");
  // A key-value pair takes >= 8 (key length) + 1 (a non-empty key) + 4 (type) + 1 (value) bytes; a
  // tensor info >= 8 + 1 (name) + 4 (n_dims) + 8 (ne[0]) + 4 (type) + 8 (offset). Both lists must
  // fit in what is left of the file, so absurd counts are refused before anything is reserved.
  constexpr uint64_t kMinKv = 14, kMinTensorInfo = 33;
  if (n_kv > c.left() / kMinKv)
    fail("{}: metadata count {} cannot fit in a {}-byte file", P, n_kv, g->map_.size());
  if (n_tensors > (c.left() - n_kv * kMinKv) / kMinTensorInfo)
    fail("{}: tensor count {} cannot fit in a {}-byte file (with {} metadata entries)", P, n_tensors,
         g->map_.size(), n_kv);

  for (uint64_t i = 0; i < n_kv; ++i) {
    const std::string key = c.string(fmt::format("metadata key #{}", i));
    if (key.empty()) fail("{}: metadata key #{} is empty", P, i);
    if (g->meta_.contains(key)) fail("{}: metadata key '{}' appears twice", P, key);
    const std::string what = "metadata '" + key + "'";
    const uint32_t type = c.read<uint32_t>(what + " (value type)");
    json v = read_value(c, type, P, what, 0);
    g->meta_[key] = std::move(v);
    g->meta_types_[key] = type;
  }
  if (g->has("general.alignment")) {
    if (g->metadata_type("general.alignment") != kU32)
      fail("{}: metadata 'general.alignment' must be a u32, is a {}", P, kValueTypeNames[g->metadata_type("general.alignment")]);
    const uint64_t a = g->meta_.at("general.alignment").get<uint64_t>();
    if (a == 0 || (a & (a - 1)) != 0)
      fail("{}: metadata 'general.alignment' = {} must be a power of two", P, a);
    g->alignment_ = size_t(a);
  }

  g->tensors_.reserve(size_t(std::min(n_tensors, kMaxReserve)));
  for (uint64_t i = 0; i < n_tensors; ++i) {
    GgufTensor t;
    t.name = c.string(fmt::format("tensor #{} name", i));
    const std::string what = "tensor '" + t.name + "'";
    const uint32_t n_dims = c.read<uint32_t>(what + " (n_dims)");
    if (n_dims < 1 || n_dims > 4) fail("{}: {}: n_dims {} (expected 1 to 4)", P, what, n_dims);
    // ne is stored as u64 but ggml reads it as int64: above INT64_MAX it is negative. A zero
    // dimension is valid (an empty tensor, as ggml allows); the product must fit in int64.
    constexpr uint64_t kMaxNe = uint64_t(std::numeric_limits<int64_t>::max());
    uint64_t numel = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      const uint64_t ne = c.read<uint64_t>(fmt::format("{} (ne[{}])", what, d));
      if (ne > kMaxNe) fail("{}: {}: ne[{}] = {} is negative as int64", P, what, d, int64_t(ne));
      t.ne.push_back(int64_t(ne));
    }
    // Every partial product must fit in int64 too: GgufTensor::numel() multiplies in that order.
    bool overflow = false;
    for (int64_t ne : t.ne) overflow |= __builtin_mul_overflow(numel, uint64_t(ne), &numel) || numel > kMaxNe;
    if (overflow)
      fail("{}: {}: the element count of shape {} overflows int64", P, what, t.shape_str());
    t.type = c.read<uint32_t>(what + " (type)");
    const GgmlTypeTraits* tt = ggml_type_traits(t.type);
    if (!tt) fail("{}: {}: unknown ggml type id {}", P, what, t.type);
    if (t.ne[0] % tt->block_elems != 0)
      fail("{}: {}: row length {} is not a multiple of the {} block size {}", P, what, t.ne[0], tt->name, tt->block_elems);
    const uint64_t blocks = numel / uint64_t(tt->block_elems);
    if (blocks > std::numeric_limits<uint64_t>::max() / tt->block_bytes)
      fail("{}: {}: byte size overflows", P, what);
    t.nbytes = size_t(blocks * tt->block_bytes);
    t.offset = c.read<uint64_t>(what + " (offset)");
    if (t.name.empty()) fail("{}: tensor #{} has an empty name", P, i);
    if (g->index_.count(t.name)) fail("{}: tensor '{}' appears twice", P, t.name);
    g->index_[t.name] = g->tensors_.size();
    g->tensors_.push_back(std::move(t));
  }

  // The data section starts at the next multiple of the alignment after the header.
  const size_t A = g->alignment_;
  const size_t data_start = (c.pos() + A - 1) / A * A;
  if (data_start > g->map_.size() && !g->tensors_.empty())
    fail("{}: the data section would start at byte {}, past the end of the {}-byte file", P, data_start, g->map_.size());
  const size_t data_size = g->map_.size() > data_start ? g->map_.size() - data_start : 0;
  std::vector<const GgufTensor*> by_offset;
  for (GgufTensor& t : g->tensors_) {
    if (t.offset % A != 0) fail("{}: tensor '{}': offset {} is not a multiple of the alignment {}", P, t.name, t.offset, A);
    if (t.offset > data_size || t.nbytes > data_size - t.offset)
      fail("{}: tensor '{}': bytes [{}, {}) of the data section lie past its end ({} bytes)", P, t.name, t.offset,
           t.offset + t.nbytes, data_size);
    t.data = reinterpret_cast<const std::byte*>(g->map_.data() + data_start + t.offset);
    by_offset.push_back(&t);
  }
  // Overlap: ordered by start, each non-empty tensor must start at or after the previous one's
  // end (empty tensors occupy no bytes and overlap nothing).
  std::erase_if(by_offset, [](const GgufTensor* t) { return t->nbytes == 0; });
  std::sort(by_offset.begin(), by_offset.end(), [](const GgufTensor* a, const GgufTensor* b) {
    return std::tie(a->offset, a->nbytes) < std::tie(b->offset, b->nbytes);
  });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const GgufTensor &p = *by_offset[i - 1], &q = *by_offset[i];
    if (p.offset + p.nbytes > q.offset)
      fail("{}: tensors '{}' [{}, {}) and '{}' [{}, {}) overlap in the data section", P, p.name, p.offset,
           p.offset + p.nbytes, q.name, q.offset, q.offset + q.nbytes);
  }
  return g;
}

uint32_t GgufFile::metadata_type(const std::string& key) const {
  const auto it = meta_types_.find(key);
  if (it == meta_types_.end()) fail("{}: metadata key '{}' is missing", path(), key);
  return it->second;
}

std::string GgufFile::get_string(const std::string& key) const {
  if (!has(key)) fail("{}: metadata key '{}' is missing", path(), key);
  const json& v = meta_.at(key);
  if (!v.is_string()) fail("{}: metadata '{}' must be a string, is a {}", path(), key, kValueTypeNames[metadata_type(key)]);
  return v.get<std::string>();
}

int64_t GgufFile::get_int(const std::string& key) const {
  if (!has(key)) fail("{}: metadata key '{}' is missing", path(), key);
  const json& v = meta_.at(key);
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u > uint64_t(std::numeric_limits<int64_t>::max())) fail("{}: metadata '{}' = {} is out of range", path(), key, u);
    return int64_t(u);
  }
  if (v.is_number_integer()) return v.get<int64_t>();
  fail("{}: metadata '{}' must be an integer, is a {}", path(), key, kValueTypeNames[metadata_type(key)]);
}

double GgufFile::get_float(const std::string& key) const {
  if (!has(key)) fail("{}: metadata key '{}' is missing", path(), key);
  const json& v = meta_.at(key);
  if (!v.is_number()) fail("{}: metadata '{}' must be a number, is a {}", path(), key, kValueTypeNames[metadata_type(key)]);
  return v.get<double>();
}

namespace {

template <class T>
void put(std::string& s, T v) {
  s.append(reinterpret_cast<const char*>(&v), sizeof v);
}
void put_string(std::string& s, const std::string& v) {
  put<uint64_t>(s, v.size());
  s += v;
}

void put_scalar(std::string& s, uint32_t type, const json& v) {
  switch (type) {
    case kU8: put<uint8_t>(s, v.get<uint8_t>()); break;
    case kI8: put<int8_t>(s, v.get<int8_t>()); break;
    case kU16: put<uint16_t>(s, v.get<uint16_t>()); break;
    case kI16: put<int16_t>(s, v.get<int16_t>()); break;
    case kU32: put<uint32_t>(s, v.get<uint32_t>()); break;
    case kI32: put<int32_t>(s, v.get<int32_t>()); break;
    case kF32: put<float>(s, float(v.get<double>())); break;
    case kBool: put<uint8_t>(s, v.get<bool>() ? 1 : 0); break;
    case kString: put_string(s, v.get<std::string>()); break;
    case kU64: put<uint64_t>(s, v.get<uint64_t>()); break;
    case kI64: put<int64_t>(s, v.get<int64_t>()); break;
    case kF64: put<double>(s, v.get<double>()); break;
    default: SINKQ_ASSERT(false);
  }
}

uint32_t element_type(const json& a) {
  if (a.empty() || a[0].is_string()) return kString;
  if (a[0].is_boolean()) return kBool;
  if (a[0].is_number_float()) return kF32;
  if (a[0].is_array()) return kArray;
  return kI32;
}

void put_array(std::string& s, const json& a) {
  const uint32_t et = element_type(a);
  put<uint32_t>(s, et);
  put<uint64_t>(s, a.size());
  for (const json& e : a) {
    if (et == kArray) put_array(s, e);
    else put_scalar(s, et, e);
  }
}

}  // namespace

std::string gguf_metadata_file(const GgufFile& g, bool (*keep)(const std::string& key)) {
  std::vector<std::string> keys;
  for (const auto& [k, v] : g.metadata().items())
    if (keep(k)) keys.push_back(k);
  std::sort(keys.begin(), keys.end());
  std::string s = "GGUF";
  put<uint32_t>(s, 3);
  put<uint64_t>(s, 0);
  put<uint64_t>(s, keys.size());
  for (const std::string& k : keys) {
    put_string(s, k);
    const uint32_t t = g.metadata_type(k);
    put<uint32_t>(s, t);
    if (t == kArray) put_array(s, g.metadata().at(k));
    else put_scalar(s, t, g.metadata().at(k));
  }
  return s;
}

const GgufTensor* GgufFile::find(const std::string& name) const {
  const auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

}  // namespace sinkq
