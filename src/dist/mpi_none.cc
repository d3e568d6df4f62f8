// sinkq/dist/mpi_none.cc — mpi.h in a build without MPI (CMake found no MPI, or -DSINKQ_MPI=OFF):
// one process, always. Started by an MPI launcher with several ranks it refuses at once (each rank
// would otherwise run the whole command on its own); a message to a peer cannot happen.
#include <cstdio>
#include <cstdlib>

#include "core/error.h"
#include "dist/mpi.h"

namespace sinkq::dist {

namespace {
[[noreturn]] void no_mpi(std::string_view what) {
  fail("{}: this sinkq was built without MPI (configure with MPI installed, e.g. Debian's libopenmpi-dev, and "
       "-DSINKQ_MPI=ON)", what);
}
}  // namespace

void init(int, char**) {
  if (!launched_by_mpi()) return;
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"})
    if (const char* n = std::getenv(v); n && std::atoi(n) > 1) {
      std::fprintf(stderr, "sinkq: error: started by mpirun with %s ranks, but this sinkq was built without MPI "
                           "(configure with MPI installed and -DSINKQ_MPI=ON)\n", n);
      std::exit(1);
    }
}
bool built_with_mpi() { return false; }
bool active() { return false; }
int rank() { return 0; }
int size() { return 1; }
void finish() {}
void abort_all(std::string_view message, int code) {
  std::fflush(stdout);
  std::fprintf(stderr, "sinkq: error: %.*s\n", int(message.size()), message.data());
  std::exit(code);
}
void send(const void*, size_t, int, int, std::string_view what) { no_mpi(what); }
void recv(void*, size_t, int, int, std::string_view what) { no_mpi(what); }
void send_text(std::string_view, int, int, std::string_view what) { no_mpi(what); }
std::string recv_text(int, int, std::string_view what) { no_mpi(what); }
bool waiting(int, int) { return false; }
int64_t sum_over_ranks(int64_t v) { return v; }

}  // namespace sinkq::dist
