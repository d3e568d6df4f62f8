// sinkq/dist/world.cc — what mpi.h says of the world with or without MPI built in: the launcher
// check, the timeout setting, the serving flag (mpi.cc and mpi_none.cc share them).
#include <cstdio>
#include <cstdlib>

#include "dist/mpi.h"

namespace sinkq::dist {

namespace {
bool g_serving = false;
}  // namespace

bool launched_by_mpi() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"})
    if (std::getenv(v)) return true;
  return false;
}

double timeout_seconds() {
  static const double t = [] {
    const char* v = std::getenv("SINKQ_MPI_TIMEOUT");
    if (!v || !*v) return 600.0;
    char* end = nullptr;
    const double s = std::strtod(v, &end);
    if (end == v || *end || !(s > 0)) {
      std::fprintf(stderr, "sinkq: error: SINKQ_MPI_TIMEOUT='%s' is not a positive number of seconds\n", v);
      std::exit(1);
    }
    return s;
  }();
  return t;
}

void set_serving() { g_serving = true; }
bool serving() { return g_serving; }

}  // namespace sinkq::dist
