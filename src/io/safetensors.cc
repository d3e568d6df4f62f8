// sinkq/io/safetensors.cc — reader (validate everything before handing out a pointer) and writer.
//
// Reader checks, in order, each failing with a message that starts with the file path:
//   1. file >= 8 bytes; header length N (u64 LE) <= kMaxHeaderBytes and 8 + N <= file size;
//   2. header parses as JSON, is an object, has no duplicate top-level keys;
//   3. per tensor: an object with dtype (string; F32/F16/BF16 — other safetensors dtypes are named
//      as valid-but-unsupported), shape (array of integers >= 0), data_offsets ([begin, end],
//      integers, begin <= end <= data size), numel * dtype_size == end - begin (overflow-checked);
//   4. no two tensors overlap (sorted by begin, each starts at or after the previous end).
// Gaps between tensors and trailing bytes are tolerated (harmless; the bytes are simply unused).
#include "io/safetensors.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <tuple>

#include "core/error.h"

namespace sinkq {

using json = nlohmann::json;
namespace fs = std::filesystem;

static_assert(std::endian::native == std::endian::little, "safetensors is little-endian");

namespace {

// The reference implementation (huggingface/safetensors) refuses headers above 100 MB; a larger
// length is a corrupt or hostile file, and we must not try to parse (or allocate for) it.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

// dtypes that are valid safetensors but that sinkq cannot compute with.
bool is_other_safetensors_dtype(std::string_view s) {
  static const std::set<std::string_view> kOther = {
      "BOOL", "U8",  "I8",      "I16",     "U16",     "I32",      "U32", "I64",
      "U64",  "F64", "F8_E4M3", "F8_E5M2", "F8_E8M0", "F6_E2M3", "F6_E3M2", "F4", "C64"};
  return kOther.count(s) != 0;
}

// A JSON integer as int64; nullopt for anything else (floats, strings, out-of-range unsigned).
std::optional<int64_t> json_int(const json& v) {
  if (v.is_number_unsigned()) {
    const auto u = v.get<uint64_t>();
    if (u > uint64_t(std::numeric_limits<int64_t>::max())) return std::nullopt;
    return int64_t(u);
  }
  if (v.is_number_integer()) return v.get<int64_t>();
  return std::nullopt;
}

// One tensor entry of the header -> TensorInfo (data pointer filled in by the caller).
// `begin`/`end` are returned through out-params for the overlap check.
TensorInfo parse_entry(const std::string& file, const std::string& name, const json& e,
                       uint64_t data_size, uint64_t& begin, uint64_t& end, bool allow_raw) {
  auto bad = [&](std::string_view what) { fail("{}: tensor '{}': {}", file, name, what); };
  if (!e.is_object()) bad(fmt::format("entry must be an object, got {}", e.type_name()));
  for (const char* key : {"dtype", "shape", "data_offsets"})
    if (!e.contains(key)) bad(fmt::format("missing '{}'", key));

  TensorInfo t;
  t.name = name;
  t.file = file;
  const json& jd = e["dtype"];
  if (!jd.is_string()) bad("'dtype' must be a string");
  const auto ds = jd.get<std::string>();
  const auto dt = parse_dtype(ds);
  size_t elem = dt ? dtype_size(*dt) : 0;
  if (!dt && allow_raw && raw_dtype_size(ds) != 0) {
    t.raw_dtype = ds;
    elem = raw_dtype_size(ds);
  } else if (!dt) {
    if (is_other_safetensors_dtype(ds))
      bad(fmt::format("dtype {} is valid safetensors but not supported by sinkq (supported: F32, "
                      "F16, BF16)", ds));
    bad(fmt::format("unknown dtype '{}'", ds));
  }
  if (dt) t.dtype = *dt;

  const json& js = e["shape"];
  if (!js.is_array()) bad("'shape' must be an array of integers");
  uint64_t numel = 1;
  bool overflow = false;
  for (const json& d : js) {
    const auto v = json_int(d);
    if (!v) bad(fmt::format("'shape' must hold integers, got {}", d.dump()));
    if (*v < 0) bad(fmt::format("negative dimension {} in shape {}", *v, js.dump()));
    t.shape.push_back(*v);
    overflow |= __builtin_mul_overflow(numel, uint64_t(*v), &numel);
  }
  uint64_t nbytes = 0;
  overflow |= __builtin_mul_overflow(numel, uint64_t(elem), &nbytes);
  if (overflow) bad(fmt::format("shape {} overflows", js.dump()));

  const json& jo = e["data_offsets"];
  std::optional<int64_t> b, en;
  if (jo.is_array() && jo.size() == 2) b = json_int(jo[0]), en = json_int(jo[1]);
  if (!b || !en || *b < 0 || *en < 0)
    bad(fmt::format("'data_offsets' must be [begin, end] with non-negative integers, got {}",
                    jo.dump()));
  begin = uint64_t(*b);
  end = uint64_t(*en);
  if (begin > end) bad(fmt::format("data_offsets [{}, {}] have begin > end", begin, end));
  if (end > data_size)
    bad(fmt::format("data_offsets [{}, {}] run past the end of the data section ({} bytes)", begin,
                    end, data_size));
  if (end - begin != nbytes)
    bad(fmt::format("shape {} of {} needs {} bytes but data_offsets [{}, {}] span {}",
                    t.shape_str(), ds, nbytes, begin, end, end - begin));
  t.nbytes = size_t(nbytes);
  return t;
}

}  // namespace

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string TensorInfo::shape_str() const { return fmt::format("[{}]", fmt::join(shape, ", ")); }

size_t raw_dtype_size(std::string_view name) {
  if (name == "U8" || name == "I8") return 1;
  if (name == "I32") return 4;
  return 0;
}

std::shared_ptr<SafetensorsFile> SafetensorsFile::open(const std::string& path, bool allow_raw) {
  auto f = std::make_shared<SafetensorsFile>();
  f->map_ = MappedFile::open(path);
  const uint8_t* base = f->map_.data();
  const uint64_t size = f->map_.size();
  if (size < 8)
    fail("{}: not a safetensors file: {} bytes, shorter than the 8-byte header length", path, size);
  uint64_t n = 0;
  std::memcpy(&n, base, 8);  // little-endian u64 (static_assert above)
  if (n > kMaxHeaderBytes)
    fail("{}: header length {} is absurd (limit {}); file is corrupt or not safetensors", path, n,
         kMaxHeaderBytes);
  if (n > size - 8)
    fail("{}: header length {} runs past the end of the file ({} bytes)", path, n, size);

  // Parse, rejecting duplicate top-level keys (nlohmann would silently keep the last one).
  std::set<std::string> keys;
  std::string dup;
  auto cb = [&](int depth, json::parse_event_t ev, json& parsed) {
    if (depth == 1 && ev == json::parse_event_t::key && !keys.insert(parsed.get<std::string>()).second)
      dup = parsed.get<std::string>();
    return true;
  };
  json h;
  try {
    h = json::parse(reinterpret_cast<const char*>(base + 8), reinterpret_cast<const char*>(base + 8 + n),
                    cb);
  } catch (const json::exception& e) {
    fail("{}: header is not valid JSON: {}", path, e.what());
  }
  if (!h.is_object()) fail("{}: header must be a JSON object, got {}", path, h.type_name());
  if (!dup.empty()) fail("{}: tensor '{}' appears twice in the header", path, dup);

  const uint64_t data_size = size - 8 - n;
  const auto* data = reinterpret_cast<const std::byte*>(base + 8 + n);
  struct Span {
    uint64_t begin, end;
    size_t idx;
  };
  std::vector<Span> spans;
  if (const auto m = h.find("__metadata__"); m != h.end()) {
    if (!m->is_object()) fail("{}: '__metadata__' must be an object of strings", path);
    for (const auto& [k, v] : m->items()) {
      if (!v.is_string()) fail("{}: '__metadata__' entry '{}' must be a string", path, k);
      f->metadata_[k] = v.get<std::string>();
    }
  }
  // A sinkq artifact's tensors (packed U8 codes) read as a model directory: say what it is rather
  // than fail on the first U8 tensor's dtype.
  if (!allow_raw && f->metadata_.count("format") && f->metadata_.at("format") == "sinkq-artifact") {
    const fs::path dir = fs::path(path).parent_path();
    std::error_code ec;
    const bool has_recipe = fs::exists(dir / "sinkq_recipe.json", ec);
    fail("{}: the tensors of a sinkq artifact (quantized, packed): {}", path,
         has_recipe ? "this command needs the source model (directory or GGUF file); ppl, generate and bench run the "
                      "artifact itself"
                    : "its sinkq_recipe.json is missing, so it cannot be loaded (re-run sinkq quantize)");
  }
  for (const auto& [name, e] : h.items()) {  // std::map order: sorted by name
    if (name == "__metadata__") continue;
    uint64_t b = 0, en = 0;
    TensorInfo t = parse_entry(path, name, e, data_size, b, en, allow_raw);
    t.data = data + b;
    spans.push_back({b, en, f->tensors_.size()});
    f->tensors_.push_back(std::move(t));
  }
  // Overlap: order by begin (then end, so empty tensors at a boundary sort first).
  std::sort(spans.begin(), spans.end(),
            [](const Span& a, const Span& b) { return std::tie(a.begin, a.end) < std::tie(b.begin, b.end); });
  for (size_t i = 1; i < spans.size(); ++i) {
    const Span &p = spans[i - 1], &c = spans[i];
    if (c.begin < p.end)
      fail("{}: tensors '{}' [{}, {}) and '{}' [{}, {}) overlap", path, f->tensors_[p.idx].name,
           p.begin, p.end, f->tensors_[c.idx].name, c.begin, c.end);
  }
  // The tensors tile the data section: no hole, and the last ends where the file ends (the
  // safetensors format's rule). A header length off by a few bytes still parses (the header ends in
  // padding spaces) but shifts every tensor; bytes appended to the file are no tensor's either.
  uint64_t covered = 0;
  for (const Span& sp : spans) {
    if (sp.begin > covered)
      fail("{}: bytes [{}, {}) of the data section belong to no tensor (before '{}'): the header length or the "
           "data_offsets are wrong",
           path, covered, sp.begin, f->tensors_[sp.idx].name);
    covered = std::max(covered, sp.end);
  }
  if (covered != data_size)
    fail("{}: the tensors end at byte {} of the data section but it has {} bytes ({}): the header length ({}) or "
         "the file size is wrong",
         path, covered, data_size, covered < data_size ? "trailing bytes" : "missing bytes", n);
  return f;
}

const TensorInfo* SafetensorsFile::find(const std::string& name) const {
  auto it = std::lower_bound(tensors_.begin(), tensors_.end(), name,
                             [](const TensorInfo& t, const std::string& n) { return t.name < n; });
  return it != tensors_.end() && it->name == name ? &*it : nullptr;
}

// ---------------------------------------------------------------------------------------------
// TensorStore

namespace {

void add_file(std::map<std::string, const TensorInfo*>& by_name, const SafetensorsFile& f) {
  for (const TensorInfo& t : f.tensors()) {
    auto [it, fresh] = by_name.emplace(t.name, &t);
    if (!fresh) fail("tensor '{}' appears in both '{}' and '{}'", t.name, it->second->file, t.file);
  }
}

}  // namespace

TensorStore TensorStore::open_files(const std::vector<std::string>& paths, bool allow_raw) {
  SINKQ_CHECK(!paths.empty(), "TensorStore::open_files: no files given");
  TensorStore s;
  s.source_ = paths.size() == 1 ? paths[0] : fmt::format("{}", fmt::join(paths, ", "));
  for (const auto& p : paths) {
    s.files_.push_back(SafetensorsFile::open(p, allow_raw));
    add_file(s.by_name_, *s.files_.back());
  }
  return s;
}

// HF's order of preference: a single model.safetensors wins over an index.
TensorStore TensorStore::open_dir(const std::string& dir) {
  std::error_code ec;
  if (!fs::exists(dir, ec)) fail("model directory '{}' does not exist", dir);
  if (!fs::is_directory(dir, ec)) fail("'{}' is not a directory", dir);
  const std::string single = dir + "/model.safetensors";
  const std::string index = dir + "/model.safetensors.index.json";
  if (fs::exists(single, ec)) {
    TensorStore s = open_files({single});
    s.source_ = dir;
    return s;
  }
  if (!fs::exists(index, ec)) {
    if (fs::exists(dir + "/pytorch_model.bin", ec) || fs::exists(dir + "/pytorch_model.bin.index.json", ec))
      fail("'{}' has only PyTorch .bin weights; sinkq reads safetensors (convert the model)", dir);
    fail("'{}' has neither model.safetensors nor model.safetensors.index.json", dir);
  }

  json j;
  try {
    j = json::parse(read_file(index));
  } catch (const json::exception& e) {
    fail("{}: not valid JSON: {}", index, e.what());
  }
  if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
    fail("{}: missing 'weight_map' object", index);
  // tensor -> shard file name; shards opened once each, in name order (deterministic).
  std::map<std::string, std::string> weight_map;
  std::map<std::string, std::shared_ptr<SafetensorsFile>> shards;
  for (const auto& [name, v] : j["weight_map"].items()) {
    if (!v.is_string()) fail("{}: weight_map entry '{}' must be a file name", index, name);
    std::string shard = v.get<std::string>();
    // Shards live beside the index; a path component would let an index read arbitrary files.
    if (shard.empty() || shard.find('/') != std::string::npos || shard == "." || shard == "..")
      fail("{}: weight_map maps '{}' to '{}', which is not a plain file name", index, name, shard);
    weight_map[name] = shard;
    shards.emplace(shard, nullptr);
  }
  if (shards.empty()) fail("{}: weight_map is empty", index);
  TensorStore s;
  s.source_ = dir;
  for (auto& [shard, f] : shards) {
    const std::string p = dir + "/" + shard;
    if (!fs::exists(p, ec)) {
      const std::string& missing = shard;  // (clang 14 cannot capture a structured binding)
      const auto it = std::find_if(weight_map.begin(), weight_map.end(),
                                   [&](const auto& kv) { return kv.second == missing; });
      fail("{}: weight_map maps '{}' to shard '{}', which does not exist", index, it->first, missing);
    }
    f = SafetensorsFile::open(p);
    s.files_.push_back(f);
  }
  for (const auto& [name, shard] : weight_map)
    if (!shards[shard]->find(name))
      fail("{}: weight_map maps '{}' to shard '{}', but that shard has no tensor '{}'", index, name,
           shard, name);
  // Tensors a shard holds beyond the index are kept (HF loads whole shards too); the weights
  // layer rejects names it does not know. Duplicates across shards are an error.
  for (const auto& f : s.files_) add_file(s.by_name_, *f);
  return s;
}

const TensorInfo* TensorStore::find(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : it->second;
}

const TensorInfo& TensorStore::get(const std::string& name) const {
  const TensorInfo* t = find(name);
  if (!t) fail("missing tensor '{}' in {}", name, source_);
  return *t;
}

std::vector<const TensorInfo*> TensorStore::all() const {
  std::vector<const TensorInfo*> v;
  v.reserve(by_name_.size());
  for (const auto& [_, t] : by_name_) v.push_back(t);
  return v;
}

// ---------------------------------------------------------------------------------------------
// Writer

SafetensorsStreamWriter::SafetensorsStreamWriter(const std::string& path, std::vector<TensorSpec> tensors,
                                                 const std::map<std::string, std::string>& metadata)
    : path_(path), w_(path) {
  // Layout order: element size descending, then name. The data section starts at a multiple of
  // 8 (header padded), so every tensor then starts at a multiple of its own element size — the
  // same rule torch/safetensors uses — and readers may load F32 data through aligned pointers.
  std::set<std::string_view> names;
  for (const TensorSpec& t : tensors) {
    SINKQ_CHECK(!t.name.empty() && t.name != "__metadata__", "{}: invalid tensor name '{}'", path, t.name);
    SINKQ_CHECK(names.insert(t.name).second, "{}: tensor '{}' given twice", path, t.name);
    for (int64_t d : t.shape) SINKQ_CHECK(d >= 0, "{}: tensor '{}': negative dimension {}", path, t.name, d);
    SINKQ_CHECK(t.raw_dtype.empty() || raw_dtype_size(t.raw_dtype) != 0,
                "{}: tensor '{}': unknown raw dtype '{}' (U8, I8, I32)", path, t.name, t.raw_dtype);
  }
  auto elem_size = [](const TensorSpec& t) { return element_size(t); };
  data_order(tensors);
  json h = json::object();
  uint64_t off = 0;
  for (const TensorSpec& t : tensors) {
    uint64_t numel = 1;
    for (int64_t d : t.shape) numel *= uint64_t(d);
    const uint64_t bytes = numel * elem_size(t);
    h[t.name] = {{"dtype", t.raw_dtype.empty() ? std::string(dtype_name(t.dtype)) : t.raw_dtype},
                 {"shape", t.shape},
                 {"data_offsets", {off, off + bytes}}};
    off += bytes;
    order_.push_back({t, bytes});
  }
  if (!metadata.empty()) h["__metadata__"] = metadata;
  std::string header = h.dump();  // keys sorted (std::map): deterministic
  header.append((8 - header.size() % 8) % 8, ' ');
  const uint64_t n = header.size();
  char len[8];
  std::memcpy(len, &n, 8);
  w_.write(len, 8);
  w_.write(header);
}

size_t SafetensorsStreamWriter::element_size(const TensorSpec& t) {
  return t.raw_dtype.empty() ? dtype_size(t.dtype) : raw_dtype_size(t.raw_dtype);
}

void SafetensorsStreamWriter::data_order(std::vector<TensorSpec>& specs) {
  std::sort(specs.begin(), specs.end(), [](const TensorSpec& a, const TensorSpec& b) {
    const size_t sa = element_size(a), sb = element_size(b);
    return sa != sb ? sa > sb : a.name < b.name;
  });
}

const std::string& SafetensorsStreamWriter::next_name() const {
  static const std::string none;
  return next_ < order_.size() ? order_[next_].first.name : none;
}

void SafetensorsStreamWriter::write(const std::string& name, std::span<const std::byte> bytes) {
  SINKQ_CHECK(next_ < order_.size(), "{}: tensor '{}' written after the last one", path_, name);
  const auto& [spec, size] = order_[next_];
  SINKQ_CHECK(name == spec.name, "{}: tensor '{}' written where '{}' comes next", path_, name, spec.name);
  SINKQ_CHECK(bytes.size() == size, "{}: tensor '{}': shape [{}] of {} needs {} bytes, got {}", path_, name,
              fmt::join(spec.shape, ", "), spec.raw_dtype.empty() ? dtype_name(spec.dtype) : spec.raw_dtype, size,
              bytes.size());
  w_.write(bytes.data(), bytes.size());
  ++next_;
}

void SafetensorsStreamWriter::commit() {
  SINKQ_CHECK(next_ == order_.size(), "{}: {} of {} tensors written ('{}' is missing)", path_, next_, order_.size(),
              next_name());
  w_.commit();
}

void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  std::vector<SafetensorsStreamWriter::TensorSpec> specs;
  std::map<std::string_view, const TensorToWrite*> by_name;
  for (const TensorToWrite& t : tensors) {
    specs.push_back({t.name, t.dtype, t.shape, t.raw_dtype});
    by_name[t.name] = &t;
  }
  SafetensorsStreamWriter w(path, std::move(specs), metadata);
  while (!w.done()) {
    const TensorToWrite* t = by_name.at(w.next_name());
    w.write(t->name, t->bytes);
  }
  w.commit();
}

}  // namespace sinkq
