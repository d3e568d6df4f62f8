// sinkq/io/safetensors.h — validated, memory-mapped safetensors reader and atomic writer.
//
// File layout: u64 little-endian header length N, N bytes of JSON
// {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, "__metadata__": {..}},
// then the data section; offsets are relative to the start of the data section.
// Validation before any use: file >= 8 bytes, header length inside the file and <= 100 MB, JSON
// parses to an object without duplicate names, every entry has dtype/shape/data_offsets, dtype is
// F32/F16/BF16 (other safetensors dtypes such as I8/F64 get a "valid but not supported" error),
// dims >= 0, numel(shape) * dtype_size == end - begin, begin <= end <= data size, no two tensors
// overlap. Gaps between tensors are tolerated. Every error names the file and (where there is one)
// the tensor.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "core/mmap.h"

namespace sinkq {

struct TensorInfo {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  // Points into the mapping; valid while the file lives. Aligned to the element size for files
  // from torch/safetensors or write_safetensors, but not guaranteed for arbitrary valid files
  // (ModelWeights copies such tensors to aligned memory).
  const std::byte* data = nullptr;
  size_t nbytes = 0;
  std::string file;                 // path of the file that holds it (for error messages)
  // Non-empty for a raw integer tensor ("U8", "I8", "I32"), accepted only by readers opened with
  // allow_raw (artifacts: packed codes, zero points); `dtype` is then meaningless and nbytes =
  // numel · raw_dtype_size(raw_dtype).
  std::string raw_dtype;

  int64_t numel() const;
  std::string shape_str() const;    // "[64, 172]"
};

class SafetensorsFile {
 public:
  // allow_raw: also accept the raw integer dtypes U8, I8, I32 (TensorInfo::raw_dtype); model
  // weights never use them, so the default refuses them as before.
  static std::shared_ptr<SafetensorsFile> open(const std::string& path, bool allow_raw = false);

  const std::string& path() const { return map_.path(); }
  const std::vector<TensorInfo>& tensors() const { return tensors_; }  // sorted by name
  const TensorInfo* find(const std::string& name) const;               // nullptr if absent
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  MappedFile map_;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, std::string> metadata_;
};

// All tensors of a model directory: `model.safetensors`, or the shards listed in
// `model.safetensors.index.json` (weight_map: tensor -> shard file). Every shard is validated,
// every tensor of the index must be in the shard the index names, and no name may be duplicated.
class TensorStore {
 public:
  static TensorStore open_dir(const std::string& dir);
  static TensorStore open_files(const std::vector<std::string>& paths, bool allow_raw = false);

  const TensorInfo* find(const std::string& name) const;
  // Throws sinkq::Error "missing tensor 'NAME' in DIR" if absent.
  const TensorInfo& get(const std::string& name) const;
  std::vector<const TensorInfo*> all() const;  // sorted by name
  const std::vector<std::shared_ptr<SafetensorsFile>>& files() const { return files_; }
  const std::string& source() const { return source_; }  // the directory or file for messages

 private:
  std::vector<std::shared_ptr<SafetensorsFile>> files_;
  std::map<std::string, const TensorInfo*> by_name_;
  std::string source_;
};

struct TensorToWrite {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  std::span<const std::byte> bytes;  // numel * dtype_size bytes, little-endian
  std::string raw_dtype = {};        // "U8" | "I8" | "I32": written with that dtype instead of `dtype`
};

// Element size of a raw integer safetensors dtype ("U8", "I8": 1, "I32": 4); 0 for any other name.
size_t raw_dtype_size(std::string_view name);

// Writes a safetensors file atomically (temp file + rename). Header keys are sorted; the data
// section holds tensors by element size descending, then by name, so that every tensor starts at a
// multiple of its element size (the header is padded with spaces to a multiple of 8, as torch's
// writer does). `__metadata__` is written when `metadata` is non-empty. Same inputs ->
// byte-identical output. Throws sinkq::Error naming the path (and tensor) for duplicate names,
// negative dims or a byte count that does not match the shape.
void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

// The same file written tensor by tensor, for outputs too large to hold (calibration statistics of
// every layer and sample): the shapes are declared up front (the header goes first), then each
// tensor's bytes are given in the file's data order (next_name(): element size descending, then
// name), streamed to a temp file that commit() renames onto `path` (core/mmap.h AtomicFileWriter:
// nothing is left behind without commit). Errors name the path and tensor.
class SafetensorsStreamWriter {
 public:
  struct TensorSpec {
    std::string name;
    DType dtype = DType::F32;
    std::vector<int64_t> shape;
    std::string raw_dtype = {};
  };
  // The data order: element size descending, then name (every tensor then starts at a multiple of
  // its element size). Sorts `specs` in place.
  static void data_order(std::vector<TensorSpec>& specs);
  static size_t element_size(const TensorSpec& t);
  SafetensorsStreamWriter(const std::string& path, std::vector<TensorSpec> tensors,
                          const std::map<std::string, std::string>& metadata = {});
  const std::string& next_name() const;  // "" when every tensor was written
  bool done() const { return next_ == order_.size(); }
  void write(const std::string& name, std::span<const std::byte> bytes);
  void commit();

 private:
  std::string path_;
  AtomicFileWriter w_;
  std::vector<std::pair<TensorSpec, uint64_t>> order_;  // data order, byte sizes
  size_t next_ = 0;
};

}  // namespace sinkq
