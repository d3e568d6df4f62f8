// sinkq/core/mmap.h — read-only memory-mapped file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace sinkq {

// Bytes the kernel says a new allocation can take (/proc/meminfo MemAvailable), 0 if unknown:
// what loaders and calibration check a large allocation against before making it.
uint64_t mem_available_bytes();

class MappedFile {
 public:
  MappedFile() = default;
  // Throws sinkq::Error naming the path if it cannot be opened or mapped. Empty files map to size 0.
  static MappedFile open(const std::string& path);
  ~MappedFile();
  MappedFile(MappedFile&& o) noexcept;
  MappedFile& operator=(MappedFile&& o) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  std::string path_;
};

// Whole file as a string; throws sinkq::Error naming the path (also for a directory or other
// non-regular file, which std::ifstream would otherwise read as empty).
std::string read_file(const std::string& path);
// Whole text file with CRLF read as LF (the evaluation convention of the papers' data loaders and
// of ../shared/golden); throws sinkq::Error naming the path.
std::string read_text_file(const std::string& path);
// Text as read_text_file gives it: CRLF line ends as LF.
std::string lf_text(std::string_view s);
// Writes atomically: path.tmp.<pid>.<n> then rename(2). Throws sinkq::Error naming the path.
void write_file_atomic(const std::string& path, std::string_view contents);

// Streaming form of write_file_atomic for outputs too large to build in memory (multi-GB
// safetensors). Bytes go to `path.tmp.<pid>.<n>` (n: per-process counter, so two threads writing
// the same path never share a temp file); commit() fsyncs and renames it onto `path`. If commit()
// is never reached (an exception on the way), the destructor removes the temp file: `path` keeps
// its old contents (or stays absent) and nothing is left behind.
class AtomicFileWriter {
 public:
  explicit AtomicFileWriter(std::string path);  // creates the temp file; throws naming it
  ~AtomicFileWriter();
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  void write(const void* data, size_t n);  // throws naming the temp file
  void write(std::string_view s) { write(s.data(), s.size()); }
  void commit();                           // fsync + close + rename; throws naming both paths
  uint64_t bytes_written() const { return written_; }
  const std::string& temp_path() const { return tmp_; }

 private:
  std::string path_, tmp_;
  int fd_ = -1;
  uint64_t written_ = 0;
};

}  // namespace sinkq
