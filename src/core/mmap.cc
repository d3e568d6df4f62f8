#include "core/mmap.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>

#include "core/error.h"

namespace sinkq {

MappedFile MappedFile::open(const std::string& path) {
  MappedFile m;
  m.path_ = path;
  // O_NONBLOCK: opening a FIFO for reading would otherwise block until a writer appears (a named
  // pipe given as a model file hung `sinkq ppl`); the S_ISREG check below then refuses it. The flag
  // does nothing to regular files.
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) fail("cannot open '{}': {}", path, std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int e = errno;
    ::close(fd);
    fail("cannot stat '{}': {}", path, std::strerror(e));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    fail("'{}' is not a regular file", path);
  }
  m.size_ = size_t(st.st_size);
  if (m.size_ > 0) {
    void* p = ::mmap(nullptr, m.size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      int e = errno;
      ::close(fd);
      fail("cannot mmap '{}': {}", path, std::strerror(e));
    }
    m.data_ = static_cast<const uint8_t*>(p);
  }
  ::close(fd);
  return m;
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
}

MappedFile::MappedFile(MappedFile&& o) noexcept
    : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)), path_(std::move(o.path_)) {}

MappedFile& MappedFile::operator=(MappedFile&& o) noexcept {
  if (this != &o) {
    if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
    path_ = std::move(o.path_);
  }
  return *this;
}

std::string read_file(const std::string& path) {
  // open(2) + fstat first: std::ifstream "opens" a directory and then reads nothing, which would
  // turn `read_file("some/dir")` into a silent empty string. O_NONBLOCK so that a FIFO is refused
  // by the check below instead of blocking the open (no effect on regular files).
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) fail("cannot open '{}': {}", path, std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    fail("cannot read '{}': not a regular file", path);
  }
  std::string out;
  out.reserve(size_t(st.st_size));
  char buf[1 << 16];
  for (;;) {
    ssize_t r = ::read(fd, buf, sizeof buf);
    if (r < 0) {
      if (errno == EINTR) continue;
      int e = errno;
      ::close(fd);
      fail("cannot read '{}': {}", path, std::strerror(e));
    }
    if (r == 0) break;
    out.append(buf, size_t(r));
  }
  ::close(fd);
  return out;
}

namespace {
std::atomic<uint64_t> g_tmp_counter{0};
}  // namespace

AtomicFileWriter::AtomicFileWriter(std::string path) : path_(std::move(path)) {
  tmp_ = fmt::format("{}.tmp.{}.{}", path_, ::getpid(), g_tmp_counter.fetch_add(1));
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) fail("cannot create '{}' (writing '{}'): {}", tmp_, path_, std::strerror(errno));
}

AtomicFileWriter::~AtomicFileWriter() {
  if (fd_ >= 0) {  // not committed: drop the partial temp file
    ::close(fd_);
    ::unlink(tmp_.c_str());
  }
}

void AtomicFileWriter::write(const void* data, size_t n) {
  SINKQ_ASSERT(fd_ >= 0);
  const auto* p = static_cast<const char*>(data);
  size_t off = 0;
  while (off < n) {
    ssize_t w = ::write(fd_, p + off, n - off);
    if (w < 0) {
      if (errno == EINTR) continue;
      fail("cannot write '{}': {}", tmp_, std::strerror(errno));
    }
    off += size_t(w);
  }
  written_ += n;
}

void AtomicFileWriter::commit() {
  SINKQ_ASSERT(fd_ >= 0);
  // fsync before rename: after a crash `path` holds either the old or the complete new contents.
  const bool synced = ::fsync(fd_) == 0;
  int e = synced ? 0 : errno;
  const bool closed = ::close(fd_) == 0;  // always close, even when fsync failed
  if (synced && !closed) e = errno;
  fd_ = -1;
  if (!synced || !closed) {
    ::unlink(tmp_.c_str());
    fail("cannot finish writing '{}': {}", tmp_, std::strerror(e));
  }
  if (::rename(tmp_.c_str(), path_.c_str()) != 0) {
    e = errno;
    ::unlink(tmp_.c_str());
    fail("cannot rename '{}' to '{}': {}", tmp_, path_, std::strerror(e));
  }
}

std::string read_text_file(const std::string& path) { return lf_text(read_file(path)); }

std::string lf_text(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\r' && i + 1 < s.size() && s[i + 1] == '\n') continue;
    out.push_back(s[i]);
  }
  return out;
}

void write_file_atomic(const std::string& path, std::string_view contents) {
  AtomicFileWriter w(path);
  w.write(contents);
  w.commit();
}

uint64_t mem_available_bytes() {
  uint64_t kb = 0;
  if (FILE* f = std::fopen("/proc/meminfo", "r")) {
    char line[256];
    while (std::fgets(line, sizeof line, f))
      if (std::sscanf(line, "MemAvailable: %lu kB", &kb) == 1) break;
    std::fclose(f);
  }
  return kb * 1024;
}

}  // namespace sinkq
