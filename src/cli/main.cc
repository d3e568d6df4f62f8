// sinkq — command line entry point. Every subcommand lives in its own cmd_*.cc.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include "cli/commands.h"
#include "core/error.h"
#include "dist/mpi.h"

namespace {

// OpenMP threads wait passively (sleep on a futex at the end of a parallel region) unless the user
// chose a policy. libgomp's default spins for ~0.3 ms first; on a shared 2-core machine a spinning
// worker takes the core the other one needs, and `sinkq ppl` with 2 threads ran 3x slower than with
// 1 thread beside one busy process (passive: 1.08x; BENCHMARKS.md "Threads on a shared machine").
// libgomp reads OMP_WAIT_POLICY when it is loaded, before main, so the first start sets the
// variable and re-executes itself once; set OMP_WAIT_POLICY yourself (e.g. active) to skip this.
void use_passive_omp_wait(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY")) return;
  if (::setenv("OMP_WAIT_POLICY", "passive", 1) != 0) return;
  ::execv("/proc/self/exe", argv);  // returns only on failure (no /proc): run on as we are
}

// Under mpirun (dist/mpi.h) an error on any rank ends every rank.
int fail_with(const char* message) {
  if (sinkq::dist::active()) sinkq::dist::abort_all(message);
  std::fflush(stdout);
  std::fprintf(stderr, "sinkq: error: %s\n", message);
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  use_passive_omp_wait(argv);
  sinkq::dist::init(argc, argv);
  CLI::App app{"sinkq: outlier-aware low-bit quantization and inference of LLMs", "sinkq"};
  app.set_version_flag("--version", std::string("sinkq ") + SINKQ_VERSION);
  app.require_subcommand(1);
  sinkq::cli::register_inspect(app);
  sinkq::cli::register_tokenize(app);
  sinkq::cli::register_generate(app);
  sinkq::cli::register_ppl(app);
  sinkq::cli::register_eval(app);
  sinkq::cli::register_serve(app);
  sinkq::cli::register_bench(app);
  sinkq::cli::register_analyze(app);
  sinkq::cli::register_prefix(app);
  sinkq::cli::register_quantize(app);
  sinkq::cli::register_ladder(app);
  sinkq::cli::register_calib(app);
  try {
    // Under mpirun -np N > 1 only the commands that run a model through the pipeline's stages
    // (the subcommand is the first argument that is not an option; checked before it runs).
    if (sinkq::dist::active()) {
      std::string cmd;
      for (int i = 1; i < argc && cmd.empty(); ++i)
        if (argv[i][0] != '-') cmd = argv[i];
      SINKQ_CHECK(cmd == "ppl" || cmd == "generate" || cmd == "bench" || cmd == "quantize",
                  "sinkq {} does not run under mpirun -np {} (distributed: ppl, generate, bench, quantize)", cmd,
                  sinkq::dist::size());
    }
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help / --version (exit code 0) print as CLI11 prints them; a flag that does not parse is an
    // error like every other: "sinkq: error: ...", exit 1.
    if (e.get_exit_code() == 0) return app.exit(e);
    return fail_with((std::string(e.what()) + " (see 'sinkq --help')").c_str());
  } catch (const sinkq::Error& e) {
    return fail_with(e.what());
  } catch (const std::bad_alloc&) {
    return fail_with("out of memory");
  } catch (const std::exception& e) {
    return fail_with(e.what());
  }
  sinkq::dist::finish();
  return 0;
}
