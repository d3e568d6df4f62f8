// sinkq — command line entry point. Every subcommand lives in its own cmd_*.cc.
#include <cstdio>
#include <exception>

#include "cli/commands.h"
#include "core/error.h"

int main(int argc, char** argv) {
  CLI::App app{"sinkq: outlier-aware low-bit quantization and inference of LLMs", "sinkq"};
  app.set_version_flag("--version", std::string("sinkq ") + SINKQ_VERSION);
  app.require_subcommand(1);
  sinkq::cli::register_inspect(app);
  sinkq::cli::register_tokenize(app);
  sinkq::cli::register_generate(app);
  sinkq::cli::register_ppl(app);
  sinkq::cli::register_bench(app);
  sinkq::cli::register_analyze(app);
  sinkq::cli::register_prefix(app);
  sinkq::cli::register_quantize(app);
  sinkq::cli::register_ladder(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const sinkq::Error& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "sinkq: error: %s\n", e.what());
    return 1;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "sinkq: error: out of memory\n");
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sinkq: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
