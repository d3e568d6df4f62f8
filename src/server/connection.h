// sinkq/server/connection.h — the connection layer of `sinkq serve`: cpp-httplib's request parser
// and router with sinkq's own loop over each connection, so that slow and hostile clients cannot
// take the server from the others.
//
// cpp-httplib 0.11 (Debian's) gives each connection a pool thread for its whole life and bounds
// each socket read, not the request: 50 clients sending a byte a second held every thread and left
// /health unanswered for 30 s+; a POST without Content-Length was read until the client closed.
// GuardedHttpServer overrides its per-connection entry point (process_and_close_socket; the parser
// and router, process_request, are kept) and adds:
//   - a cap on open connections: beyond it a 503 + Retry-After is written at once and the socket
//     closed (the pool has cap + 8 threads, so admission and the 503s never wait behind the slow);
//   - deadlines per request: its line and headers within header_timeout of its first byte (of the
//     connection, for the first request), its body within request_timeout of its first byte; past
//     either the request is answered 408 and the connection closed;
//   - keep-alive limits: the next request must start within keep_alive_timeout, at most
//     keep_alive_max requests per connection;
//   - framing checks before any body is read: a POST without Content-Length or Transfer-Encoding
//     has an empty body (RFC 9112 §6.3, not "until the client closes"); both at once, several
//     differing Content-Lengths, a non-numeric one or a Transfer-Encoding other than chunked are
//     refused (400 / 501) and the connection closed, as is one whose GET carries a body;
//   - client_gone(), for the handler on the connection's thread: a generation stops at the next
//     token when its client has closed the connection (streaming or not).
#pragma once

#include <httplib.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "server/server.h"  // ConnectionLimits

namespace sinkq::server {

class GuardedHttpServer : public httplib::Server {
 public:
  explicit GuardedHttpServer(const ConnectionLimits& limits);
  ~GuardedHttpServer() override;
  const ConnectionLimits& limits() const { return limits_; }
  // Threads the task queue needs: one per admitted connection and a few for the 503s.
  size_t threads() const { return size_t(limits_.max_connections) + 8; }

  // For the handler on a connection's thread (false / "" on any other thread):
  // the client has closed or reset the connection (a pipelined next request does not count);
  static bool client_gone();
  // the request's deadline passed while it was read: the seconds of the deadline that passed
  // ("header" or "request" in what), 0 when none did;
  static double request_expired(const char** what = nullptr);
  // the framing of the request cannot be trusted: the status and message to answer (0: it can);
  static int framing_error(std::string* message);
  // closes the connection after this response.
  static void close_after_response();

  int open_connections() const { return open_.load(); }
  uint64_t refused_connections() const { return refused_.load(); }
  uint64_t expired_requests() const { return expired_.load(); }

 private:
  bool process_and_close_socket(socket_t sock) override;
  void refuse(socket_t sock);
  // Writes an error response straight to the socket (httplib is not writing one).
  void write_answer(socket_t sock, int status, const char* reason, const std::string& message, const char* type);

  struct Closer;  // closes answered sockets once the client has read (connection.cc)
  std::unique_ptr<Closer> closer_;
  ConnectionLimits limits_;
  std::atomic<int> open_{0};
  std::atomic<uint64_t> refused_{0}, expired_{0};
};

}  // namespace sinkq::server
