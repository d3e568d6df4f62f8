// sinkq/server/server.h — `sinkq serve`: an OpenAI-compatible HTTP server over one Engine.
//
// Endpoints (docs/serve.md): POST /v1/completions (text or token-id prompts, echo + logprobs for
// lm-eval's loglikelihood, stop strings, streaming as server-sent events), POST
// /v1/chat/completions (the model's own chat template via calib/prefix.h render_chat; stops on the
// template's end-of-turn token), GET /v1/models, /health, /metrics (Prometheus text), and the
// tokenizer endpoints lm-eval's remote tokenizer uses (GET /tokenizer_info, POST /tokenize,
// POST /detokenize).
//
// Concurrency: `parallel` Sessions over the one Engine (weights shared, a KV cache each), created
// at start. A request takes a free session or waits in a bounded queue (`queue` requests; beyond
// it: 503 + Retry-After). A streaming client that goes away cancels its generation at the next
// token and frees the session. HTTP is cpp-httplib (Debian's libcpp-httplib-dev), JSON nlohmann.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace sinkq {
class Engine;
}

namespace sinkq::server {

// What one connection may take (server/connection.h enforces it; docs/serve.md "Slow and hostile
// clients"). Each bound is a flag of `sinkq serve`.
struct ConnectionLimits {
  int max_connections = 128;        // open at once; beyond: 503 + Retry-After, closed (--max-connections)
  double header_timeout_s = 10;     // a request's line and headers, from its first byte (--header-timeout)
  double request_timeout_s = 30;    // its line, headers and body, from its first byte (--request-timeout)
  double keep_alive_timeout_s = 5;  // idle time allowed between requests on a connection (--keep-alive-timeout)
  int keep_alive_max = 100;         // requests on one connection
  double io_timeout_s = 60;         // how long one write waits for the client to read (--io-timeout)
};

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;        // 0: any free port (bind() returns it)
  int parallel = 1;       // sessions, i.e. requests computed at once
  int64_t ctx = 0;        // positions per session after the engine's prefix; 0: min(2048, max_context)
  int queue = 16;         // requests that may wait for a session; more: 503
  bool batch = true;      // continuous batching of the sessions' prefills and decode steps (server/batcher.h), parallel > 1
  // With batch, which prompts go into the batches (server/batcher.h); the others prefill on their
  // request's thread. Short: those of at most matmul_rowwise_rows() tokens (they share a weight pass
  // with the decode rows); All: every prompt, in step()'s chunks; Off: none.
  enum class BatchPrefill { Short, All, Off } batch_prefill = BatchPrefill::Short;
  int batch_window_us = 2000;  // how long a batch waits for the members' steps after the first (batcher.h)
  std::string api_key;    // "" = no authentication; else "Authorization: Bearer KEY" on every endpoint but /health
  std::string alias;      // the model's name in /v1/models and responses ("" = from the path)
  size_t max_body_bytes = size_t(8) << 20;  // larger request bodies: 413
  ConnectionLimits conn;  // connections: cap, deadlines, keep-alive (server/connection.h)
  bool log_requests = true;  // one line per request on stderr
};

class Server {
 public:
  // Validates the options (errors name the flag: --parallel, --ctx, --queue, --port) and creates
  // the sessions. Nothing listens yet.
  Server(std::shared_ptr<const Engine> engine, const ServerOptions& opt);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds host:port (sinkq::Error naming them when it cannot) and returns the port.
  int bind();
  // Serves until stop(); returns once every in-flight request has been answered or cancelled.
  void run();
  // Stops accepting, cancels streaming generations at their next token, answers queued requests
  // with 503, and makes run() return. Thread-safe; call it from any thread (not a signal handler).
  void stop();
  // The context of each session and the model name, as resolved.
  int64_t ctx() const;
  const std::string& alias() const;

  struct Impl;  // (server.cc)

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace sinkq::server
