// sinkq/dist/mpi.cc — the MPI world (mpi.h), built when CMake finds MPI (mpi_none.cc otherwise).
#include "dist/mpi.h"

#include <fcntl.h>
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "core/checksum.h"
#include "core/error.h"
#include "core/mmap.h"
#include "dist/pipeline.h"

namespace sinkq::dist {

namespace {

bool g_active = false;
int g_rank = 0, g_size = 1;

// What must be equal on every rank: the executable's bytes and the arguments.
uint64_t launch_fingerprint(int argc, char** argv) {
  std::string all;
  try {
    all = checksum(read_file("/proc/self/exe"));
  } catch (const Error&) {
    all = "no /proc/self/exe";
  }
  for (int i = 1; i < argc; ++i) all += std::string("\0", 1) + argv[i];
  return std::stoull(checksum(all), nullptr, 16);
}

using Clock = std::chrono::steady_clock;

// Polls `req` until it completes or the timeout passes (then cancels it and fails).
void wait(MPI_Request& req, std::string_view what, const char* dir, int peer) {
  const auto deadline = Clock::now() + std::chrono::duration<double>(timeout_seconds());
  int done = 0;
  auto pause = std::chrono::microseconds(2);
  for (;;) {
    MPI_Status st;
    const int rc = MPI_Test(&req, &done, &st);
    if (rc != MPI_SUCCESS) {
      char msg[MPI_MAX_ERROR_STRING];
      int len = 0;
      MPI_Error_string(rc, msg, &len);
      fail("rank {}: MPI failed while {} {} (rank {}): {}", g_rank, dir, what, peer, std::string(msg, size_t(len)));
    }
    if (done) return;
    if (Clock::now() > deadline) {
      MPI_Cancel(&req);
      fail("rank {}: no answer from rank {} for {:.0f} s while {} {} (SINKQ_MPI_TIMEOUT): that rank has stopped or "
           "hangs", g_rank, peer, timeout_seconds(), dir, what);
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(200));
  }
}

constexpr size_t kPiece = size_t(1) << 30;

// VmHWM of /proc/self/status in bytes (0 when unreadable).
int64_t peak_rss() {
  std::FILE* f = std::fopen("/proc/self/status", "r");
  if (!f) return 0;
  char line[256];
  long long kb = 0;
  while (std::fgets(line, sizeof line, f))
    if (std::sscanf(line, "VmHWM: %lld kB", &kb) == 1) break;
  std::fclose(f);
  return int64_t(kb) * 1024;
}

}  // namespace

void init(int argc, char** argv) {
  if (!launched_by_mpi()) return;
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_size);
  if (g_size == 1) {  // mpirun -np 1: one process, the ordinary code path
    MPI_Finalize();
    g_rank = 0;
    return;
  }
  g_active = true;
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  install_handoff();
  // Only rank 0 prints results; the others keep stderr for their errors.
  if (g_rank > 0) {
    const int null = ::open("/dev/null", O_WRONLY);
    if (null >= 0) {
      std::fflush(stdout);
      ::dup2(null, STDOUT_FILENO);
      ::close(null);
    }
  }
  // Every rank must run the same binary with the same arguments (mpirun -np 1 a : -np 1 b, or a
  // binary rebuilt between copies on two hosts, would otherwise compute something else).
  const uint64_t mine = launch_fingerprint(argc, argv);
  std::vector<uint64_t> all(static_cast<size_t>(g_size));
  MPI_Request req;
  MPI_Iallgather(&mine, 1, MPI_UINT64_T, all.data(), 1, MPI_UINT64_T, MPI_COMM_WORLD, &req);
  try {
    wait(req, "the launch check", "exchanging", 0);
    for (int r = 1; r < g_size; ++r)
      SINKQ_CHECK(all[size_t(r)] == all[0], "rank {} runs another binary or other arguments than rank 0: every rank of "
                  "mpirun must run the same sinkq command", r);
  } catch (const Error& e) {
    abort_all(e.what());
  }
}

bool active() { return g_active; }
int rank() { return g_rank; }
int size() { return g_size; }

void finish() {
  if (!g_active) return;
  // Each rank's share of the model and its peak memory (docs/scale.md), on stderr.
  std::fprintf(stderr, "sinkq (rank %d of %d): %s, peak RSS %.1f MiB\n", g_rank, g_size, stage_report().c_str(),
               double(peak_rss()) / (1 << 20));
  if (g_rank == 0 && serving()) {
    try {
      stop_workers();
    } catch (const Error& e) {
      abort_all(e.what());
    }
  }
  MPI_Finalize();
  g_active = false;
}

void abort_all(std::string_view message, int code) {
  std::fflush(stdout);
  if (!g_active) {
    std::fprintf(stderr, "sinkq: error: %.*s\n", int(message.size()), message.data());
    std::exit(code);
  }
  std::fprintf(stderr, "sinkq (rank %d of %d): error: %.*s\n", g_rank, g_size, int(message.size()), message.data());
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, code);
  std::exit(code);
}

namespace {

// A message of any size as pieces of at most kPiece bytes (MPI counts are int), each started by
// `start(pointer, bytes, &request)` and waited for with the timeout.
template <class Start>
void in_pieces(char* p, size_t bytes, int peer, std::string_view what, const char* dir, Start start) {
  do {
    const size_t n = std::min(bytes, kPiece);
    MPI_Request req;
    start(p, int(n), &req);
    wait(req, what, dir, peer);
    p += n;
    bytes -= n;
  } while (bytes > 0);
}

}  // namespace

void send(const void* data, size_t bytes, int dest, int tag, std::string_view what) {
  in_pieces(static_cast<char*>(const_cast<void*>(data)), bytes, dest, what, "sending",
            [&](char* p, int n, MPI_Request* r) { MPI_Isend(p, n, MPI_BYTE, dest, tag, MPI_COMM_WORLD, r); });
}

void recv(void* data, size_t bytes, int src, int tag, std::string_view what) {
  in_pieces(static_cast<char*>(data), bytes, src, what, "receiving",
            [&](char* p, int n, MPI_Request* r) { MPI_Irecv(p, n, MPI_BYTE, src, tag, MPI_COMM_WORLD, r); });
}

void send_text(std::string_view s, int dest, int tag, std::string_view what) {
  const uint64_t n = s.size();
  send(&n, sizeof n, dest, tag, what);
  send(s.data(), n, dest, tag, what);
}

std::string recv_text(int src, int tag, std::string_view what) {
  uint64_t n = 0;
  recv(&n, sizeof n, src, tag, what);
  SINKQ_CHECK(n < (uint64_t(1) << 34), "rank {}: a message of {} bytes from rank {} ({})", g_rank, n, src, what);
  std::string s(n, '\0');
  recv(s.data(), n, src, tag, what);
  return s;
}

int64_t sum_over_ranks(int64_t v) {
  if (!g_active) return v;
  // Gathered on rank 0, added in rank order, sent back: deterministic, and every wait bounded.
  if (g_rank > 0) {
    send(&v, sizeof v, 0, kTagSum, "a partial sum");
    recv(&v, sizeof v, 0, kTagSum, "a sum");
    return v;
  }
  for (int r = 1; r < g_size; ++r) {
    int64_t x = 0;
    recv(&x, sizeof x, r, kTagSum, "a partial sum");
    v += x;
  }
  for (int r = 1; r < g_size; ++r) send(&v, sizeof v, r, kTagSum, "a sum");
  return v;
}

bool built_with_mpi() { return true; }

bool waiting(int src, int tag) {
  int flag = 0;
  MPI_Iprobe(src, tag, MPI_COMM_WORLD, &flag, MPI_STATUS_IGNORE);
  return flag != 0;
}

}  // namespace sinkq::dist
