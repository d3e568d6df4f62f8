// sinkq/dist/mpi.h — the MPI world sinkq runs in under `mpirun -np N` (OpenMPI from Debian), and
// nothing at all without it: MPI is initialised only when an MPI launcher started the process
// (OMPI_COMM_WORLD_SIZE, PMI_SIZE or PMIX_RANK in the environment), so a plain `sinkq ...` never
// touches MPI. Point-to-point messages only (pipeline.h), every wait bounded by a timeout
// (SINKQ_MPI_TIMEOUT seconds, default 600): a rank that stops answering ends the job with an error
// naming the peer and the message, never a hang. An error on any rank aborts every rank
// (MPI_Abort) after printing it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace sinkq::dist {

// The message tags, one list: the pipeline's chunks (pipeline.cc) and the artifact's tensors
// gathered by rank 0 (engine/quantize.cc).
enum Tag : int {
  kTagHeader = 1, kTagIds = 2, kTagX = 3, kTagLogits = 4, kTagScore = 5,  // pipeline stages
  kTagSpecs = 6, kTagTensor = 7, kTagPrefix = 8,                          // quantize
  kTagSum = 9,                                                            // sum_over_ranks
  kTagStage = 10, kTagRecords = 11, kTagFromFirst = 12,                   // StageHandoff (calibration)
};

// Called once by main() before anything else runs. Under an MPI launcher with more than one rank:
// MPI_Init_thread (funneled: every MPI call comes from the main thread), then a check that every
// rank runs the same binary with the same arguments (else every rank fails with an error naming the
// first rank that differs). Without a launcher, or with one rank: nothing.
void init(int argc, char** argv);
// Whether this process is one of several MPI ranks (init found a launcher and N > 1).
bool active();
int rank();  // 0 without MPI
int size();  // 1 without MPI
// The bound on every wait for a peer, in seconds (SINKQ_MPI_TIMEOUT; default 600).
double timeout_seconds();

// Ends the job: rank 0 tells the other ranks to stop (pipeline.h), every rank calls MPI_Finalize.
// main() calls it after a successful command; without MPI it does nothing.
void finish();
// Prints "sinkq (rank r of N): error: <message>" on stderr and aborts every rank (MPI_Abort with
// `code`). Without MPI: prints "sinkq: error: ..." and exits with `code`.
[[noreturn]] void abort_all(std::string_view message, int code = 1);

// Blocking point-to-point with a timeout (MPI_Isend / MPI_Irecv polled with MPI_Test; a sleeping
// back-off, so a waiting rank leaves the core to the ranks that compute). `what` names the message
// in the timeout error. Messages of any size (split into pieces of at most 1 GiB).
void send(const void* data, size_t bytes, int dest, int tag, std::string_view what);
void recv(void* data, size_t bytes, int src, int tag, std::string_view what);
// A string (JSON, ...) as its length, then its bytes.
void send_text(std::string_view s, int dest, int tag, std::string_view what);
std::string recv_text(int src, int tag, std::string_view what);
// Whether a message with `tag` from `src` is waiting (MPI_Iprobe).
bool waiting(int src, int tag);
// The sum of `v` over every rank, on every rank (collective; v itself without MPI).
int64_t sum_over_ranks(int64_t v);

// Rank 0 after open (dist::worker serves the other ranks' stages until stop_workers): the ranks
// after the first serve rank 0's sessions. Without it (a collective command such as quantize) the
// job ends without a stop message.
void set_serving();
bool serving();
// Whether an MPI launcher started this process (OMPI_COMM_WORLD_SIZE, PMI_SIZE or PMIX_RANK set).
bool launched_by_mpi();
// Whether this build has MPI (CMake: SINKQ_MPI, found MPI); without it every rank is alone and
// mpirun with several ranks is refused by init().
bool built_with_mpi();

}  // namespace sinkq::dist
