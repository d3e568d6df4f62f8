#include "server/connection.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

namespace sinkq::server {

namespace {

using clock_type = std::chrono::steady_clock;

// What the handler on a connection's thread can ask about its connection.
struct ConnState {
  socket_t sock = INVALID_SOCKET;
  bool expired = false;            // a deadline passed while the request was read
  const char* expired_what = "";   // "header" or "request"
  double expired_s = 0;
  bool close_after = false;        // close the connection after this response
  int framing_status = 0;          // the request's framing cannot be trusted: answer this
  std::string framing_message;
};
thread_local ConnState* tl_conn = nullptr;

clock_type::time_point plus(clock_type::time_point t, double seconds) {
  return t + std::chrono::duration_cast<clock_type::duration>(std::chrono::duration<double>(seconds));
}
clock_type::time_point after(double seconds) { return plus(clock_type::now(), seconds); }

// Waits for `events` on the socket until `until`, in slices of 100 ms so that a stopping server
// (`svr` closed, when given) is seen. 1: ready (or an error the next call will report), 0: timed
// out, -1: failed or the server is stopping.
int wait_for(socket_t sock, short events, clock_type::time_point until, const std::atomic<socket_t>* svr) {
  for (;;) {
    if (svr && *svr == INVALID_SOCKET) return -1;
    const auto now = clock_type::now();
    if (now >= until) return 0;
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(until - now).count();
    pollfd p{sock, events, 0};
    const int r = ::poll(&p, 1, int(std::min<int64_t>(left, 100)));
    if (r > 0) return 1;
    if (r < 0 && errno != EINTR) return -1;
  }
}

// The peer has closed or reset the connection. Readable with data is a pipelined request, not an
// end; readable with nothing to read (recv → 0) or an error is.
bool peer_closed(socket_t sock) {
  pollfd p{sock, short(POLLIN | POLLRDHUP), 0};
  if (::poll(&p, 1, 0) <= 0) return false;
  if (p.revents & (POLLERR | POLLHUP | POLLNVAL)) return true;
  char c;
  const ssize_t n = ::recv(sock, &c, 1, MSG_PEEK | MSG_DONTWAIT);
  return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

void ip_and_port(const sockaddr_storage& a, std::string& ip, int& port) {
  char b[INET6_ADDRSTRLEN] = {};
  if (a.ss_family == AF_INET) {
    const auto* s = reinterpret_cast<const sockaddr_in*>(&a);
    ::inet_ntop(AF_INET, &s->sin_addr, b, sizeof b);
    port = ntohs(s->sin_port);
  } else if (a.ss_family == AF_INET6) {
    const auto* s = reinterpret_cast<const sockaddr_in6*>(&a);
    ::inet_ntop(AF_INET6, &s->sin6_addr, b, sizeof b);
    port = ntohs(s->sin6_port);
  }
  ip = b;
}

// A connection's socket as httplib reads and writes it: reads buffered, each bounded by the
// request's deadline; each write by the I/O timeout.
class DeadlineStream : public httplib::Stream {
 public:
  DeadlineStream(socket_t sock, const std::atomic<socket_t>& svr, double io_timeout_s, ConnState& st)
      : sock_(sock), svr_(svr), io_timeout_s_(io_timeout_s), st_(st) {}

  void set_deadline(clock_type::time_point t, const char* what, double seconds) {
    deadline_ = t;
    what_ = what;
    what_s_ = seconds;
  }
  bool has_buffered() const { return off_ < len_; }
  // Bytes read and written since the last call (a request's start).
  void start_request() { read_n_ = written_n_ = 0; }
  uint64_t bytes_read() const { return read_n_; }
  uint64_t bytes_written() const { return written_n_; }

  bool is_readable() const override { return has_buffered() || wait_for(sock_, POLLIN, read_until(), &svr_) > 0; }
  bool is_writable() const override {
    return wait_for(sock_, POLLOUT, after(io_timeout_s_), nullptr) > 0 && !peer_closed(sock_);
  }
  ssize_t read(char* ptr, size_t size) override {
    if (!has_buffered()) {
      const int w = wait_for(sock_, POLLIN, read_until(), &svr_);
      if (w == 0 && clock_type::now() >= deadline_) {
        st_.expired = true;
        st_.expired_what = what_;
        st_.expired_s = what_s_;
      }
      if (w <= 0) return -1;
      ssize_t n;
      do n = ::recv(sock_, buf_, sizeof buf_, 0);
      while (n < 0 && errno == EINTR);
      if (n <= 0) return n;
      off_ = 0;
      len_ = size_t(n);
    }
    const size_t n = std::min(size, len_ - off_);
    std::memcpy(ptr, buf_ + off_, n);
    off_ += n;
    read_n_ += n;
    return ssize_t(n);
  }
  ssize_t write(const char* ptr, size_t size) override {
    if (!is_writable()) return -1;
    ssize_t n;
    do n = ::send(sock_, ptr, size, MSG_NOSIGNAL);
    while (n < 0 && errno == EINTR);
    if (n > 0) written_n_ += uint64_t(n);
    return n;
  }
  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    sockaddr_storage a{};
    socklen_t l = sizeof a;
    if (::getpeername(sock_, reinterpret_cast<sockaddr*>(&a), &l) == 0) ip_and_port(a, ip, port);
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    sockaddr_storage a{};
    socklen_t l = sizeof a;
    if (::getsockname(sock_, reinterpret_cast<sockaddr*>(&a), &l) == 0) ip_and_port(a, ip, port);
  }
  socket_t socket() const override { return sock_; }

 private:
  clock_type::time_point read_until() const { return std::min(deadline_, after(io_timeout_s_)); }

  socket_t sock_;
  const std::atomic<socket_t>& svr_;
  double io_timeout_s_;
  ConnState& st_;
  clock_type::time_point deadline_ = clock_type::time_point::max();
  const char* what_ = "";
  double what_s_ = 0;
  char buf_[4096];
  size_t off_ = 0, len_ = 0;
  uint64_t read_n_ = 0, written_n_ = 0;
};

std::string lower(std::string s) {
  for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// The request's body framing, checked before any of the body is read. Sets the status and message
// to answer when it cannot be trusted; a POST with neither header gets "Content-Length: 0".
void check_framing(httplib::Request& req, size_t max_body, ConnState& st) {
  auto refuse = [&](int status, std::string msg) {
    st.framing_status = status;
    st.framing_message = std::move(msg);
    st.close_after = true;  // where this body ends is unknown: the connection cannot carry another request
  };
  const bool te = req.has_header("Transfer-Encoding"), cl = req.has_header("Content-Length");
  if (te && cl)
    return refuse(400, "the request has both Transfer-Encoding and Content-Length (RFC 9112 §6.3: refused, not guessed)");
  if (te) {
    if (req.get_header_value_count("Transfer-Encoding") != 1 || lower(req.get_header_value("Transfer-Encoding")) != "chunked")
      return refuse(501, fmt::format("Transfer-Encoding '{}' is not supported (only 'chunked')", req.get_header_value("Transfer-Encoding")));
  }
  uint64_t length = 0;
  if (cl) {
    std::string value;
    for (size_t i = 0; i < req.get_header_value_count("Content-Length"); ++i) {
      const std::string v = req.get_header_value("Content-Length", i);
      if (v.empty() || v.size() > 19 || !std::all_of(v.begin(), v.end(), [](char c) { return c >= '0' && c <= '9'; }))
        return refuse(400, fmt::format("Content-Length '{}' is not a byte count", v));
      if (i > 0 && v != value) return refuse(400, "the request has several Content-Length headers that differ");
      value = v;
    }
    length = std::stoull(value);
    if (length > max_body)
      return refuse(413, fmt::format("the request body ({} bytes by its Content-Length) exceeds {} bytes", length, max_body));
  }
  const bool has_body = te || length > 0;
  if (req.method == "POST" || req.method == "PUT" || req.method == "PATCH" || req.method == "DELETE") {
    // RFC 9112 §6.3: a request with neither header has no body. httplib 0.11 would read one until
    // the client closes the connection.
    if (!te && !cl) req.set_header("Content-Length", "0");
  } else if (has_body) {
    // httplib does not read a GET's body: its bytes would be parsed as the next request.
    st.close_after = true;
  }
}

}  // namespace

// A socket answered and closed for writing by the server (a 503 over the cap, a 408) is closed
// for good only once the client has read the answer and closed its end, or after 2 s: close(2)
// with the client's request still arriving would send a reset, and a reset makes the client's
// kernel drop the answer it has not read yet. One thread for all of them, so a flood of refused
// connections costs no pool thread more than the write.
struct GuardedHttpServer::Closer {
  std::mutex mu;
  std::vector<std::pair<socket_t, clock_type::time_point>> socks;
  std::atomic<bool> done{false};
  std::thread thread{[this] { loop(); }};

  ~Closer() {
    done = true;
    thread.join();
    for (auto& [s, t] : socks) ::close(s);
  }
  void add(socket_t s) {
    ::shutdown(s, SHUT_WR);
    std::lock_guard g(mu);
    // A flood: no lingering beyond 256 (httplib 0.11 answers 500 on a socket numbered >= 1024).
    if (socks.size() >= 256) {
      ::close(s);
      return;
    }
    socks.emplace_back(s, clock_type::now() + std::chrono::seconds(2));
  }
  void loop() {
    std::vector<pollfd> fds;
    while (!done) {
      {
        std::lock_guard g(mu);
        fds.clear();
        for (auto& [s, t] : socks) fds.push_back({s, POLLIN, 0});
      }
      if (fds.empty()) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        continue;
      }
      ::poll(fds.data(), fds.size(), 20);
      std::lock_guard g(mu);
      const auto now = clock_type::now();
      for (size_t i = 0; i < fds.size(); ++i) {
        bool finished = now >= socks[i].second;
        if (fds[i].revents) {
          char drain[4096];
          const ssize_t n = ::recv(socks[i].first, drain, sizeof drain, MSG_DONTWAIT);
          finished |= n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
        }
        if (finished) {
          ::close(socks[i].first);
          socks[i].first = INVALID_SOCKET;
        }
      }
      // socks[0, fds.size()) are the polled ones; later ones were added meanwhile.
      socks.erase(std::remove_if(socks.begin(), socks.end(), [](const auto& e) { return e.first == INVALID_SOCKET; }),
                  socks.end());
    }
  }
};

void GuardedHttpServer::write_answer(socket_t sock, int status, const char* reason, const std::string& message,
                                         const char* type) {
  const std::string body = fmt::format(R"({{"error":{{"message":"{}","type":"{}","param":null,"code":{}}}}})", message,
                                       type, status);
  const std::string msg = fmt::format(
      "HTTP/1.1 {} {}\r\nContent-Type: application/json\r\n{}Connection: close\r\nContent-Length: {}\r\n\r\n{}", status,
      reason, status == 503 ? "Retry-After: 1\r\n" : "", body.size(), body);
  ::send(sock, msg.data(), msg.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
}

GuardedHttpServer::~GuardedHttpServer() = default;

GuardedHttpServer::GuardedHttpServer(const ConnectionLimits& limits) : closer_(std::make_unique<Closer>()), limits_(limits) {
  set_keep_alive_max_count(size_t(std::max(1, limits.keep_alive_max)));
  set_keep_alive_timeout(time_t(std::max(1.0, limits.keep_alive_timeout_s)));  // advertised (Keep-Alive header)
  set_read_timeout(time_t(std::max(1.0, limits.io_timeout_s)));
  set_write_timeout(time_t(std::max(1.0, limits.io_timeout_s)));
  // The Keep-Alive header httplib writes before this handler runs is wrong for a connection that
  // is closed after the response.
  set_post_routing_handler([](const httplib::Request&, httplib::Response& res) {
    if (!tl_conn || !tl_conn->close_after) return;
    res.headers.erase("Keep-Alive");
    if (res.get_header_value("Connection") != "close") {
      res.headers.erase("Connection");
      res.set_header("Connection", "close");
    }
  });
}

bool GuardedHttpServer::client_gone() { return tl_conn && peer_closed(tl_conn->sock); }

double GuardedHttpServer::request_expired(const char** what) {
  if (!tl_conn || !tl_conn->expired) return 0;
  if (what) *what = tl_conn->expired_what;
  return tl_conn->expired_s;
}

int GuardedHttpServer::framing_error(std::string* message) {
  if (!tl_conn || !tl_conn->framing_status) return 0;
  if (message) *message = tl_conn->framing_message;
  return tl_conn->framing_status;
}

void GuardedHttpServer::close_after_response() {
  if (tl_conn) tl_conn->close_after = true;
}

// Over the cap: a 503 written at once (the socket's buffer takes it without waiting).
void GuardedHttpServer::refuse(socket_t sock) {
  ++refused_;
  write_answer(sock, 503, "Service Unavailable",
                   fmt::format("the server has {} connections open, its limit (sinkq serve --max-connections); retry later",
                               limits_.max_connections),
                   "server_busy");
  closer_->add(sock);
}

bool GuardedHttpServer::process_and_close_socket(socket_t sock) {
  struct Count {
    std::atomic<int>& n;
    ~Count() { --n; }
  } count{open_};
  if (++open_ > limits_.max_connections) {
    refuse(sock);
    return true;
  }
  ConnState st;
  st.sock = sock;
  tl_conn = &st;
  DeadlineStream strm(sock, svr_sock_, limits_.io_timeout_s, st);
  bool ret = false, linger = false;
  for (int k = 0; k < limits_.keep_alive_max && svr_sock_ != INVALID_SOCKET; ++k) {
    // The request's first byte; the first request's deadlines count from the connection's start.
    if (k > 0 && !strm.has_buffered() && wait_for(sock, POLLIN, after(limits_.keep_alive_timeout_s), &svr_sock_) <= 0)
      break;
    const auto start = clock_type::now();
    st.expired = st.close_after = false;
    st.framing_status = 0;
    strm.set_deadline(plus(start, limits_.header_timeout_s), "header", limits_.header_timeout_s);
    bool closed = false;
    strm.start_request();
    ret = process_request(strm, k + 1 == limits_.keep_alive_max, closed, [&](httplib::Request& req) {
      // The head is in: the body has until the request's deadline.
      strm.set_deadline(plus(start, limits_.request_timeout_s), "request", limits_.request_timeout_s);
      check_framing(req, payload_max_length_, st);
    });
    if (st.expired) {
      ++expired_;
      // Cut off inside its request line, where httplib answers nothing: say why.
      if (strm.bytes_read() > 0 && strm.bytes_written() == 0)
        write_answer(sock, 408, "Request Timeout",
                         fmt::format("the request's line and headers did not arrive within {} s (sinkq serve --header-timeout)",
                                     limits_.header_timeout_s),
                         "invalid_request_error");
    }
    // The server ends the connection after an answer: the client may still be sending.
    linger = st.expired || ((closed || st.close_after || k + 1 == limits_.keep_alive_max) && ret);
    if (!ret || closed || st.close_after || st.expired) break;
  }
  tl_conn = nullptr;
  if (linger) {
    closer_->add(sock);
  } else {
    ::shutdown(sock, SHUT_RDWR);
    ::close(sock);
  }
  return ret;
}

}  // namespace sinkq::server
