// sinkq serve -m DIR|ARTIFACT|GGUF [--host 127.0.0.1] [--port 8080] [--parallel N] [--ctx C]
//             [--queue Q] [--api-key K] [--alias NAME] [--json] + the quantization flags
// An OpenAI-compatible HTTP server over one Engine (src/server/server.h, docs/serve.md). SIGINT /
// SIGTERM: stop accepting, cancel streams at their next token, answer the queue with 503, exit 0.
#include <fmt/format.h>

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "cli/commands.h"
#include "cli/quant_flags.h"
#include "server/server.h"
#include "sinkq/engine.h"

namespace sinkq::cli {

namespace {
int g_signal_pipe[2] = {-1, -1};  // SIGINT / SIGTERM → the watcher thread
}  // namespace

void register_serve(CLI::App& app) {
  struct Opts : CommonFlags {
    server::ServerOptions s;
    bool no_batch = false;
    std::string batch_prefill = "short";
  };
  auto o = std::make_shared<Opts>();
  CLI::App* cmd = app.add_subcommand("serve", "Serve the model over HTTP (OpenAI-compatible completions and chat)");
  add_model_flag(*cmd, *o);
  cmd->add_option("--host", o->s.host, "Address to listen on (127.0.0.1: this machine only)")->capture_default_str();
  cmd->add_option("--port", o->s.port, "Port (0: any free port, printed at start)")->capture_default_str()->check(decimal_in(0, 65535));
  cmd->add_option("--parallel", o->s.parallel, "Requests computed at once (a session and KV cache each; weights shared)")
      ->capture_default_str()->check(decimal_in(1, 256));
  cmd->add_option("-c,--ctx,--ctx-size", o->s.ctx, "Positions per session after the model's prefix (default: min(2048, the model's))")
      ->check(decimal_in(1, INT32_MAX));
  cmd->add_flag("--no-batch", o->no_batch,
                "With --parallel > 1: run each session alone instead of batching the prompt chunks and decode "
                "steps of the sessions that generate at the same time (the same tokens either way; for measuring)");
  cmd->add_option("--batch-prefill", o->batch_prefill,
                  "With batching: which prompts ride in the batches with the decode steps: short (at most the "
                  "GEMV's rows, 16 AVX2 / 64 AVX-512: they share a weight pass with the decode rows), all (every "
                  "prompt, in chunks of 512), off (each prefills alone on its request's thread); the same tokens "
                  "every way")
      ->capture_default_str();
  cmd->add_option("--queue", o->s.queue, "Requests that may wait for a session; beyond: 503 with Retry-After")
      ->capture_default_str()->check(decimal_in(0, 4096));
  cmd->add_option("--api-key", o->s.api_key,
                  "Require 'Authorization: Bearer KEY' (default: $SINKQ_API_KEY when set; else no key)");
  cmd->add_option("--alias", o->s.alias, "The model's name in /v1/models (default: from the path)");
  // Slow and hostile clients (server/connection.h, docs/serve.md).
  cmd->add_option("--max-connections", o->s.conn.max_connections,
                  "Client connections open at once; beyond: 503 with Retry-After, closed at once")
      ->capture_default_str()->check(decimal_in(1, 900));
  cmd->add_option("--header-timeout", o->s.conn.header_timeout_s,
                  "Seconds a request's line and headers may take from its first byte; later: 408, closed")
      ->capture_default_str();
  cmd->add_option("--request-timeout", o->s.conn.request_timeout_s,
                  "Seconds a request's line, headers and body may take from its first byte; later: 408, closed")
      ->capture_default_str();
  cmd->add_option("--keep-alive-timeout", o->s.conn.keep_alive_timeout_s,
                  "Seconds a connection may stay idle between requests")
      ->capture_default_str();
  cmd->add_option("--io-timeout", o->s.conn.io_timeout_s,
                  "Seconds one write of a response may wait for the client to read (a stalled client is dropped)")
      ->capture_default_str();
  const std::shared_ptr<QuantFlags> qf = add_quant_flags(*cmd);
  add_output_flags(*cmd, *o);
  cmd->callback([o, qf] {
    apply_threads(*o);
    if (qf->dump_if_asked()) return;
    using BP = server::ServerOptions::BatchPrefill;
    SINKQ_CHECK(o->batch_prefill == "short" || o->batch_prefill == "all" || o->batch_prefill == "off",
                "unknown --batch-prefill '{}': expected short, all or off", o->batch_prefill);
    if (o->s.api_key.empty())
      if (const char* k = std::getenv("SINKQ_API_KEY"); k && *k) o->s.api_key = k;
    // SIGINT / SIGTERM: a handler writes the signal's number to a pipe (async-signal-safe,
    // whichever thread takes it — OpenBLAS and OpenMP start threads before this runs, so masking
    // and sigwait would miss those); a watcher thread reads it and stops the server. SIGPIPE: a
    // client that went away is a failed write, not the end of the process.
    SINKQ_CHECK(pipe(g_signal_pipe) == 0, "sinkq serve: cannot create a pipe for signal handling");
    struct sigaction sa {};
    sa.sa_handler = [](int sig) {
      const char c = char(sig);
      [[maybe_unused]] const ssize_t n = write(g_signal_pipe[1], &c, 1);
    };
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGINT, &sa, nullptr);
    sigaction(SIGTERM, &sa, nullptr);
    std::signal(SIGPIPE, SIG_IGN);

    OpenOptions oo;
    if (!qf->model_is_artifact(o->model, "serve")) oo.recipe = qf->config();
    oo.pipeline = pipeline_options(*qf, "serve");
    const std::shared_ptr<const Engine> engine = Engine::open(o->model, oo);
    o->s.batch = !o->no_batch;
    o->s.batch_prefill = o->batch_prefill == "all" ? BP::All : o->batch_prefill == "off" ? BP::Off : BP::Short;
    server::Server srv(engine, o->s);
    const int port = srv.bind();
    const std::string url = fmt::format("http://{}:{}", o->s.host, port);
    if (o->json) {  // one line (JSON Lines), flushed: a supervisor reads the port from it
      const nlohmann::json ready = {{"url", url},
                  {"port", port},
                  {"model", srv.alias()},
                  {"runtime", engine->runtime_name()},
                  {"ctx", srv.ctx()},
                  {"parallel", o->s.parallel},
                  {"batch", o->s.parallel > 1 && !o->no_batch},
                  {"batch_prefill", o->s.parallel > 1 && !o->no_batch ? o->batch_prefill : "off"},
                  {"prefix_tokens", engine->prefix_tokens()}};
      std::printf("%s\n", ready.dump().c_str());
      std::fflush(stdout);
    }
    std::fprintf(stderr, "sinkq serve: %s on %s (%s, %s; %d session%s of %lld positions%s)\n", srv.alias().c_str(),
                 url.c_str(), engine->runtime_name(), engine->describe().c_str(), o->s.parallel,
                 o->s.parallel == 1 ? "" : "s", static_cast<long long>(srv.ctx()),
                 engine->prefix_size() ? fmt::format(" behind a {}-token fp prefix", engine->prefix_size()).c_str() : "");
    std::thread waiter([&] {
      char c = 0;
      while (read(g_signal_pipe[0], &c, 1) < 0 && errno == EINTR) {
      }
      if (c == SIGINT || c == SIGTERM) {
        std::fprintf(stderr, "sinkq serve: %s: finishing in-flight requests, then exiting\n",
                     c == SIGINT ? "SIGINT" : "SIGTERM");
        srv.stop();
      }
    });
    srv.run();
    const char wake = 0;  // run() ended on its own: end the watcher
    [[maybe_unused]] const ssize_t n = write(g_signal_pipe[1], &wake, 1);
    waiter.join();
    std::fprintf(stderr, "sinkq serve: stopped\n");
  });
}

}  // namespace sinkq::cli
