// sinkq — command line entry point. Every subcommand lives in its own cmd_*.cc.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "cli/commands.h"
#include "core/error.h"
#include "dist/mpi.h"
#include "kernels/cpu_features.h"
#include "kernels/ops.h"

namespace {

// Two libraries read their settings from the environment when they are loaded, before main, so
// the first start sets what the user left unset and re-executes itself once:
// - OMP_WAIT_POLICY=passive: OpenMP threads sleep on a futex at the end of a parallel region.
//   libgomp's default spins for ~0.3 ms first; on a shared 2-core machine a spinning worker takes
//   the core the other one needs, and `sinkq ppl` with 2 threads ran 3x slower than with 1 thread
//   beside one busy process (passive: 1.08x; BENCHMARKS.md "Threads on a shared machine").
// - OPENBLAS_CORETYPE=Haswell (on a CPU with sinkq's AVX2 path or more): the AVX2 and scalar
//   paths' sgemm runs OpenBLAS's AVX2 kernels, so their results have the same bits on every host
//   of that path (docs/architecture.md "Reproducibility"): left to itself OpenBLAS 0.3.21 picks a
//   kernel set per CPU model (Zen 4 gets Cooperlake's; Intel family-6 models it has no case for,
//   such as 207, its SSE3 "Prescott" kernels, 2.2-2.35x slower in calibration), each rounding
//   differently. The AVX-512 path's sgemm is oneDNN's.
// Set either variable yourself (e.g. OMP_WAIT_POLICY=active) and it is left as it is.
void set_library_environment(char** argv) {
  bool changed = false;
  if (!std::getenv("OMP_WAIT_POLICY") && ::setenv("OMP_WAIT_POLICY", "passive", 1) == 0) changed = true;
  if (!std::getenv("OPENBLAS_CORETYPE") && int(sinkq::detected_isa()) >= int(sinkq::Isa::Avx2) &&
      ::setenv("OPENBLAS_CORETYPE", "Haswell", 1) == 0)
    changed = true;
  if (changed) ::execv("/proc/self/exe", argv);  // returns only on failure (no /proc): run on as we are
}

// Edit distance with adjacent transpositions (optimal string alignment: "kdl" is one edit from
// "kld"), for "did you mean".
size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i)
    for (size_t j = 1; j <= b.size(); ++j) {
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  return d[a.size()][b.size()];
}

// The closest of `names` to `word` when it is close enough to be a typo (at most 2 edits, and
// fewer than half the word without its leading dashes), else "".
std::string closest(std::string_view word, const std::vector<std::string>& names) {
  const size_t bare = word.size() - std::min(word.find_first_not_of('-'), word.size());
  std::string best;
  size_t best_d = 3;
  for (const std::string& n : names) {
    const size_t d = edit_distance(word, n);
    if (d < best_d && 2 * d < bare) best = n, best_d = d;
  }
  return best;
}

// " (did you mean ...?)" for a command line CLI11 refused: an unknown command, or options the
// command does not have, each matched against the names it knows.
std::string did_you_mean(const CLI::App& app, int argc, char** argv) {
  std::vector<std::string> commands;
  for (const CLI::App* s : app.get_subcommands([](const CLI::App*) { return true; })) commands.push_back(s->get_name());
  const CLI::App* cmd = nullptr;
  std::vector<std::string> hints;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.empty() || a[0] == '-') continue;
    for (const CLI::App* s : app.get_subcommands([](const CLI::App*) { return true; }))
      if (s->get_name() == a) cmd = s;
    if (!cmd) {
      if (const std::string c = closest(a, commands); !c.empty()) hints.push_back("'" + c + "' for '" + a + "'");
    }
    break;  // the command is the first word that is not an option
  }
  if (cmd) {
    std::vector<std::string> names;
    for (const CLI::Option* o : cmd->get_options()) {
      if (o == cmd->get_help_ptr()) continue;  // never what a mistyped option meant
      for (const std::string& l : o->get_lnames()) names.push_back("--" + l);
      for (const std::string& s : o->get_snames()) names.push_back("-" + s);
    }
    for (int i = 1; i < argc; ++i) {
      std::string a = argv[i];
      if (a.size() < 2 || a[0] != '-' || (a[1] >= '0' && a[1] <= '9') || a[1] == '.') continue;  // -1.5 is a value
      a = a.substr(0, a.find('='));
      if (std::find(names.begin(), names.end(), a) != names.end()) continue;
      if (const std::string c = closest(a, names); !c.empty()) hints.push_back(c + " for " + a);
    }
  }
  if (hints.empty()) return "";
  std::string out = " (did you mean ";
  for (size_t i = 0; i < hints.size(); ++i) out += (i ? ", " : "") + hints[i];
  return out + "?)";
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
  set_library_environment(argv);
  sinkq::dist::init(argc, argv);
  CLI::App app{"sinkq: outlier-aware low-bit quantization and inference of LLMs", "sinkq"};
  // --version also names what a result's bits depend on (docs/architecture.md "Reproducibility"):
  // the CPU, the kernel path and the sgemm library's kernel set. Computed only when asked.
  app.set_version_flag("--version", [] {
    using namespace sinkq;
    return fmt::format("sinkq {}\nhost: {}\nkernels: {} (detected {}); sgemm: {}; AVX2 / scalar paths' sgemm: {}",
                       SINKQ_VERSION, cpu_description(), isa_name(active_isa()), isa_name(detected_isa()),
                       sgemm_backend(active_isa()), sgemm_backend(Isa::Avx2));
  });
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
    return fail_with((std::string(e.what()) + did_you_mean(app, argc, argv) + " (see 'sinkq --help')").c_str());
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
