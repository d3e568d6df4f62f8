// sinkq serve under slow, impatient and hostile clients (server/connection.h), on 127.0.0.1 only,
// every loop bounded in count and time: /health answers within 1 s while 50 clients dribble their
// headers a byte at a time; connections beyond --max-connections get a 503 at once; a head or a
// body that stops arriving is answered 408 and closed at its deadline; framing that cannot be
// trusted is refused before any body is read; keep-alive is bounded; a client that hangs up on a
// non-streaming request cancels its generation.
#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <regex>
#include <thread>

#include "server/running.h"

namespace sinkq::server {
namespace {

using ::testing::HasSubstr;
using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point t) { return std::chrono::duration<double>(clock_type::now() - t).count(); }

// A raw client socket: what a browser, a script or an attacker can send that httplib's client
// would not.
struct Raw {
  int fd = -1;
  explicit Raw(int port) {
    fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(uint16_t(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  }
  ~Raw() { close(); }
  void close() {
    if (fd >= 0) ::close(fd);
    fd = -1;
  }
  bool send(const std::string& s) const { return ::send(fd, s.data(), s.size(), MSG_NOSIGNAL) == ssize_t(s.size()); }
  // Everything until the server closes the connection or `timeout_s` passes.
  std::string read_all(double timeout_s, bool* closed = nullptr) const {
    std::string out;
    const auto until = clock_type::now() + std::chrono::milliseconds(int64_t(timeout_s * 1000));
    if (closed) *closed = false;
    for (;;) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - clock_type::now()).count();
      if (left <= 0) return out;
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, int(left)) <= 0) return out;
      char b[4096];
      const ssize_t n = ::recv(fd, b, sizeof b, 0);
      if (n <= 0) {
        if (closed) *closed = true;
        return out;
      }
      out.append(b, size_t(n));
    }
  }
};

int status_of(const std::string& response) {
  return response.rfind("HTTP/1.1 ", 0) == 0 ? std::atoi(response.c_str() + 9) : -1;
}
int64_t metric(const Running& r, const std::string& name) {
  const std::string m = r.get("/metrics").get<std::string>();
  std::smatch g;
  return std::regex_search(m, g, std::regex("\n" + name + " ([0-9]+)")) ? std::stoll(g[1]) : -1;
}

// 50 clients sending their request line a byte every 200 ms hold 50 connections; /health, from a
// 51st, answers at once (measured ~2 ms idle; 1 s is the bar the issue set, ~500× that), and the
// slow ones are answered 408 and closed at --header-timeout.
TEST(ServerConnections, SlowClientsDoNotStarveHealth) {
  ServerOptions o;
  o.ctx = 32;
  o.conn.header_timeout_s = 2;
  Running r(stories_engine(), o);
  std::vector<std::unique_ptr<Raw>> slow;
  for (int i = 0; i < 50; ++i) slow.push_back(std::make_unique<Raw>(r.port));
  const std::string line = "GET /health HTTP/1.1\r\n";
  for (int k = 0; k < 5; ++k) {
    for (auto& s : slow) s->send(line.substr(size_t(k), 1));
    const auto t0 = clock_type::now();
    auto res = r.client().Get("/health");
    const double dt = seconds_since(t0);
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 200);
    EXPECT_LT(dt, 1.0) << "with 50 slow clients connected";
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  const int64_t open = metric(r, "sinkq_connections_open");  // the 50, this /metrics, /health ones closing
  EXPECT_GE(open, 51);
  EXPECT_LE(open, 56);
  // The deadline: 2 s from each connection's start; ~1.2 s have passed.
  const auto t0 = clock_type::now();
  int answered = 0;
  for (auto& s : slow) {
    bool closed = false;
    const std::string got = s->read_all(5.0, &closed);
    answered += status_of(got) == 408 && closed;
  }
  EXPECT_EQ(answered, 50);
  EXPECT_LT(seconds_since(t0), 3.0);
  EXPECT_EQ(metric(r, "sinkq_requests_timed_out_total"), 50);
}

// Beyond --max-connections: a 503 with Retry-After at once, naming the flag; a freed connection
// admits the next.
TEST(ServerConnections, BeyondTheCapIs503AtOnce) {
  ServerOptions o;
  o.ctx = 32;
  o.conn.max_connections = 3;
  Running r(stories_engine(), o);
  std::vector<std::unique_ptr<Raw>> idle;
  for (int i = 0; i < 3; ++i) idle.push_back(std::make_unique<Raw>(r.port));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // admitted (a thread each)
  Raw extra(r.port);
  extra.send("GET /health HTTP/1.1\r\n\r\n");
  bool closed = false;
  const std::string got = extra.read_all(5.0, &closed);
  EXPECT_EQ(status_of(got), 503) << got;
  EXPECT_THAT(got, HasSubstr("Retry-After: 1"));
  EXPECT_THAT(got, HasSubstr("--max-connections"));
  EXPECT_TRUE(closed);
  idle[0]->close();
  bool admitted = false;
  for (int i = 0; i < 50 && !admitted; ++i) {
    auto res = r.client().Get("/health");
    admitted = res && res->status == 200;
    if (!admitted) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_TRUE(admitted);
  // Free the cap first: the server may not yet have seen the /health connection close, and with
  // two idle ones still open /metrics would be the one beyond the cap (seen on a loaded CI host).
  idle.clear();
  EXPECT_GE(metric(r, "sinkq_connections_refused_total"), 1);
}

// A head that stops arriving: 408 at --header-timeout; a body that stops: 408 at
// --request-timeout; the connection closed either way. Bounds: the deadline, plus 1.5 s for the
// 100 ms poll slices and a loaded host.
TEST(ServerConnections, StalledRequestsAre408AtTheirDeadline) {
  ServerOptions o;
  o.ctx = 32;
  o.conn.header_timeout_s = 1;
  o.conn.request_timeout_s = 2;
  Running r(stories_engine(), o);
  struct Case {
    std::string sent;
    double deadline;
    const char* flag;
  };
  const Case cases[] = {
      {"GET /heal", 1, "--header-timeout"},
      {"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n", 1, "--header-timeout"},
      {"POST /v1/completions HTTP/1.1\r\nContent-Length: 50\r\n\r\n{\"prompt\"", 2, "--request-timeout"},
      {"POST /tokenize HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n10\r\n{\"prompt\": ", 2, "--request-timeout"},
  };
  for (const Case& c : cases) {
    Raw s(r.port);
    const auto t0 = clock_type::now();
    s.send(c.sent);
    bool closed = false;
    const std::string got = s.read_all(c.deadline + 5, &closed);
    const double dt = seconds_since(t0);
    EXPECT_EQ(status_of(got), 408) << c.sent << "\n" << got;
    EXPECT_THAT(got, HasSubstr(c.flag)) << c.sent;
    EXPECT_TRUE(closed) << c.sent;
    EXPECT_GE(dt, c.deadline - 0.05) << c.sent;
    EXPECT_LT(dt, c.deadline + 1.5) << c.sent;
  }
  auto res = r.client().Get("/health");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
}

// Framing that cannot be trusted is refused before any body is read, and the connection closed
// (where the body ends is unknown); a POST with neither header has an empty body (not "until the
// client closes"); a GET's body is never parsed as the next request.
TEST(ServerConnections, FramingIsCheckedBeforeTheBody) {
  ServerOptions o;
  o.ctx = 32;
  o.max_body_bytes = 4096;
  Running r(stories_engine(), o);
  struct Case {
    std::string head;
    int status;
    const char* says;
  };
  const std::string post = "POST /tokenize HTTP/1.1\r\nHost: x\r\n";
  const Case cases[] = {
      {post + "Transfer-Encoding: gzip, chunked\r\n", 501, "only 'chunked'"},
      {post + "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n", 400, "both Transfer-Encoding and Content-Length"},
      {post + "Content-Length: -5\r\n", 400, "not a byte count"},
      {post + "Content-Length: 5\r\nContent-Length: 6\r\n", 400, "several Content-Length"},
      {post + "Content-Length: 999999999999\r\n", 413, "exceeds 4096 bytes"},
  };
  for (const Case& c : cases) {
    Raw s(r.port);
    const auto t0 = clock_type::now();
    s.send(c.head + "\r\n");  // the body never comes: the answer must not wait for it
    bool closed = false;
    const std::string got = s.read_all(10, &closed);
    EXPECT_EQ(status_of(got), c.status) << c.head << got;
    EXPECT_THAT(got, HasSubstr(c.says)) << c.head;
    EXPECT_TRUE(closed) << c.head;
    EXPECT_LT(seconds_since(t0), 1.0) << c.head;
  }
  {  // no Content-Length, no Transfer-Encoding: an empty body, answered at once (not valid JSON)
    Raw s(r.port);
    const auto t0 = clock_type::now();
    s.send(post + "Connection: close\r\n\r\n");
    const std::string got = s.read_all(10);
    EXPECT_EQ(status_of(got), 400) << got;
    EXPECT_THAT(got, HasSubstr("not valid JSON"));
    EXPECT_LT(seconds_since(t0), 1.0);
  }
  {  // "Expect: 100-continue" with a body over the cap: the 413 instead of "100 Continue"
    Raw s(r.port);
    s.send(post + "Content-Length: 999999\r\nExpect: 100-continue\r\n\r\n");
    const std::string got = s.read_all(10);
    EXPECT_EQ(status_of(got), 413) << got;
    EXPECT_EQ(got.find("100 Continue"), std::string::npos) << got;
  }
  {  // unparseable bytes: a 400 that says so, and the connection closes (where would the next start?)
    Raw s(r.port);
    const auto t0 = clock_type::now();
    s.send(std::string("\x01\x02garbage\r\n\r\n"));
    bool closed = false;
    const std::string got = s.read_all(10, &closed);
    EXPECT_EQ(status_of(got), 400) << got;
    EXPECT_THAT(got, HasSubstr("could not be parsed"));
    EXPECT_TRUE(closed);
    EXPECT_LT(seconds_since(t0), 1.0);
  }
  {  // a GET with a body that is itself a request: one response, then the connection closes
    Raw s(r.port);
    const std::string inner = "GET /nowhere HTTP/1.1\r\n\r\n";
    s.send(fmt::format("GET /health HTTP/1.1\r\nContent-Length: {}\r\n\r\n{}", inner.size(), inner));
    bool closed = false;
    const std::string got = s.read_all(10, &closed);
    EXPECT_EQ(status_of(got), 200) << got;
    EXPECT_EQ(got.find("HTTP/1.1", 1), std::string::npos) << "the body was parsed as a request:\n" << got;
    EXPECT_THAT(got, HasSubstr("Connection: close"));
    EXPECT_TRUE(closed);
  }
}

// Keep-alive: at most keep_alive_max requests on a connection (the last says Connection: close),
// and an idle connection is closed after --keep-alive-timeout.
TEST(ServerConnections, KeepAliveIsBounded) {
  ServerOptions o;
  o.ctx = 32;
  o.conn.keep_alive_max = 2;
  o.conn.keep_alive_timeout_s = 1;
  Running r(stories_engine(), o);
  {
    Raw s(r.port);
    const std::string get = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n";
    s.send(get + get + get);
    bool closed = false;
    const std::string got = s.read_all(10, &closed);
    size_t n = 0;
    for (size_t at = got.find("HTTP/1.1 200"); at != std::string::npos; at = got.find("HTTP/1.1 200", at + 1)) ++n;
    EXPECT_EQ(n, 2u) << got;
    EXPECT_THAT(got, HasSubstr("Connection: close"));
    EXPECT_TRUE(closed);
  }
  {
    Raw s(r.port);
    s.send("GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
    const auto t0 = clock_type::now();
    bool closed = false;
    const std::string got = s.read_all(10, &closed);
    EXPECT_EQ(status_of(got), 200);
    EXPECT_TRUE(closed);
    EXPECT_GE(seconds_since(t0), 0.9);
    EXPECT_LT(seconds_since(t0), 2.5);
  }
}

// A client that hangs up on a non-streaming request: its generation stops at the next token (it
// ran to max_tokens before), the session comes back.
TEST(ServerConnections, HangingUpCancelsANonStreamingRequest) {
  ServerOptions o;
  o.ctx = 512;
  Running r(smol_engine(), o);
  const std::string body = json{{"prompt", "Write a long story about a dragon."}, {"max_tokens", 400},
                                {"temperature", 0}, {"ignore_eos", true}}.dump();
  {
    Raw s(r.port);
    s.send(fmt::format("POST /v1/completions HTTP/1.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{}",
                       body.size(), body));
    bool busy = false;  // the session took the request
    for (int i = 0; i < 200 && !busy; ++i) {
      busy = metric(r, "sinkq_sessions_busy") == 1;
      if (!busy) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    ASSERT_TRUE(busy);
  }  // hang up
  bool freed = false;
  for (int i = 0; i < 300 && !freed; ++i) {
    freed = r.get("/health")["sessions_free"] == 1;
    if (!freed) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_TRUE(freed);
  EXPECT_EQ(metric(r, "sinkq_cancelled_total"), 1);
  EXPECT_LT(metric(r, "sinkq_generated_tokens_total"), 400) << "a cancelled generation does not run to max_tokens";
}

// An out-of-range number is a 400 naming its field, never a 500 (a temperature of 1e308 was a 500
// naming the CLI's --temp).
TEST(ServerConnections, ExtremeFieldValuesAre400) {
  ServerOptions o;
  o.ctx = 32;
  Running r(stories_engine(), o);
  for (const auto& [field, value] : std::vector<std::pair<std::string, json>>{
           {"temperature", 1e308}, {"top_p", 1e308}, {"max_tokens", 1e300}, {"top_k", int64_t(1) << 62},
           {"seed", 1e30}, {"logprobs", 1e9}, {"max_tokens", std::numeric_limits<int64_t>::max()}}) {
    const json res = r.post("/v1/completions", {{"prompt", "x"}, {field, value}}, 400);
    EXPECT_EQ(res["error"]["param"], field) << value;
  }
}

}  // namespace
}  // namespace sinkq::server
