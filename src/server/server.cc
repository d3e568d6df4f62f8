#include "server/server.h"

#include <fmt/format.h>
#include <httplib.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <thread>
#include <tuple>

#include "core/error.h"
#include "kernels/ops.h"
#include "server/api.h"
#include "server/batcher.h"
#include "server/connection.h"
#include "sinkq/engine.h"

namespace sinkq::server {

using nlohmann::json;
using clock_type = std::chrono::steady_clock;

namespace {

std::string default_alias(const std::string& path) {
  std::filesystem::path p(path);
  while (!p.empty() && p.filename().empty()) p = p.parent_path();  // "dir/" → "dir"
  if (p.extension() == ".gguf") {
    // "…/smollm2-135m-instruct-q4_1/model.gguf": the directory names the model better than "model".
    if (p.stem() == "model" && p.has_parent_path()) return p.parent_path().filename().string();
    return p.stem().string();
  }
  return p.filename().string();
}

double seconds_since(clock_type::time_point t) { return std::chrono::duration<double>(clock_type::now() - t).count(); }

// One session of the pool and the body tokens it holds now (for /metrics, read without a lock).
struct Slot {
  std::unique_ptr<Session> session;
  std::atomic<int64_t> tokens{0};
};

}  // namespace

struct Server::Impl {
  std::shared_ptr<const Engine> engine;
  ServerOptions opt;
  GuardedHttpServer http;  // httplib's parser and router, sinkq's connection loop (connection.h)
  socket_t listen_sock = INVALID_SOCKET;  // the last socket httplib created to bind (see bind())
  const int64_t created = std::chrono::duration_cast<std::chrono::seconds>(
                              std::chrono::system_clock::now().time_since_epoch()).count();
  std::atomic<bool> stopping{false}, run_active{false};
  std::atomic<uint64_t> next_id{1};

  // ---- the session pool and its bounded queue ----
  std::vector<std::unique_ptr<Slot>> slots;
  std::mutex pool_mu;
  std::condition_variable pool_cv;
  std::vector<Slot*> free_slots;
  int waiting = 0;
  std::unique_ptr<StepBatcher> batcher;  // parallel > 1 and opt.batch: the sessions' prefills and decode steps together

  // ---- metrics ----
  std::mutex metrics_mu;
  std::map<std::pair<std::string, int>, uint64_t> requests;  // (endpoint, status) → count
  std::atomic<uint64_t> prompt_tokens{0}, generated_tokens{0}, cancelled{0};
  std::atomic<uint64_t> prefill_us{0}, decode_us{0};
  std::deque<std::pair<clock_type::time_point, int64_t>> recent;  // generated tokens, last 10 s

  Impl(std::shared_ptr<const Engine> e, const ServerOptions& o) : engine(std::move(e)), opt(o), http(o.conn) {}

  // A free slot, waiting in the queue if there is room; null when the queue is full or the server
  // is stopping (the caller answers 503).
  std::shared_ptr<Slot> acquire() {
    std::unique_lock lk(pool_mu);
    if (free_slots.empty()) {
      if (waiting >= opt.queue || stopping) return nullptr;
      ++waiting;
      pool_cv.wait(lk, [&] { return !free_slots.empty() || stopping; });
      --waiting;
      if (free_slots.empty()) return nullptr;
    }
    Slot* s = free_slots.back();
    free_slots.pop_back();
    return std::shared_ptr<Slot>(s, [this](Slot* s) {
      s->tokens = 0;
      {
        std::lock_guard g(pool_mu);
        free_slots.push_back(s);
      }
      pool_cv.notify_one();
    });
  }

  void count_request(const std::string& endpoint, int status) {
    std::lock_guard g(metrics_mu);
    ++requests[{endpoint, status}];
  }
  void count_tokens(int64_t n) {
    generated_tokens += uint64_t(n);
    std::lock_guard g(metrics_mu);
    const auto now = clock_type::now();
    recent.emplace_back(now, n);
    while (!recent.empty() && now - recent.front().first > std::chrono::seconds(10)) recent.pop_front();
  }

  void routes();
  std::shared_ptr<Slot> acquire_or_503();
  std::string read_body(const httplib::Request& req, const httplib::ContentReader& reader, httplib::Response& res) const;
  // A response or stream chunk: {"id", "object", "created", "model", "choices"}.
  json envelope(const std::string& id, const char* object, json choices) const {
    return {{"id", id}, {"object", object}, {"created", created}, {"model", opt.alias}, {"choices", std::move(choices)}};
  }
  std::string metrics_text();
  // The 408's message when the request's deadline passed while it was read, else "".
  static std::string expired_message() {
    const char* what = "";
    const double s = GuardedHttpServer::request_expired(&what);
    if (s <= 0) return {};
    return std::string(what) == "header"
               ? fmt::format("the request's line and headers did not arrive within {} s (sinkq serve --header-timeout)", s)
               : fmt::format("the request did not arrive within {} s of its first byte (sinkq serve --request-timeout)", s);
  }
  json model_json() const;
  void check_model(const std::string& requested) const;
  std::vector<int32_t> chat_tokens(const ChatRequest& r) const;
};

namespace {

// Everything one generation needs to report, and the loop that streams it.
struct ChoiceResult {
  std::string text;             // the completion (without echo), stop string excluded
  std::string finish = "length";
  std::vector<int32_t> ids;     // generated ids
  std::vector<TokenLogprob> logprobs, prompt_logprobs;
  std::optional<TokenLogprob> stop_logprob;  // the stop id that ended it (listed in logprobs, no text)
  bool client_gone = false;
};

}  // namespace

Server::Server(std::shared_ptr<const Engine> engine, const ServerOptions& opt)
    : impl_(std::make_unique<Impl>(std::move(engine), opt)) {
  Impl& m = *impl_;
  SINKQ_CHECK(m.engine != nullptr, "sinkq serve: no model");
  ServerOptions& o = m.opt;
  SINKQ_CHECK(o.parallel >= 1 && o.parallel <= 256, "--parallel must be in 1..256 (got {})", o.parallel);
  SINKQ_CHECK(o.queue >= 0 && o.queue <= 4096, "--queue must be in 0..4096 (got {})", o.queue);
  SINKQ_CHECK(o.port >= 0 && o.port <= 65535, "--port must be in 0..65535 (got {})", o.port);
  // httplib 0.11 is built on select(2): a socket numbered FD_SETSIZE (1024) or more gets a 500.
  SINKQ_CHECK(o.conn.max_connections >= 1 && o.conn.max_connections <= 900,
              "--max-connections must be in 1..900 (got {})", o.conn.max_connections);
  for (const auto& [flag, v] : {std::pair{"--header-timeout", o.conn.header_timeout_s},
                                {"--request-timeout", o.conn.request_timeout_s},
                                {"--keep-alive-timeout", o.conn.keep_alive_timeout_s},
                                {"--io-timeout", o.conn.io_timeout_s}})
    SINKQ_CHECK(v > 0 && v <= 86400, "{} must be in (0, 86400] seconds (got {})", flag, v);
  SINKQ_CHECK(o.conn.request_timeout_s >= o.conn.header_timeout_s,
              "--request-timeout ({} s) must be at least --header-timeout ({} s): it covers the headers and the body",
              o.conn.request_timeout_s, o.conn.header_timeout_s);
  SINKQ_CHECK(o.conn.keep_alive_max >= 1, "keep_alive_max must be >= 1 (got {})", o.conn.keep_alive_max);
  const int64_t maxc = m.engine->max_context();
  if (o.ctx == 0) o.ctx = std::min<int64_t>(2048, maxc);
  SINKQ_CHECK(o.ctx >= 1 && o.ctx <= maxc,
              "--ctx {} does not fit: the model has {} positions{}, so 1..{} are left for a request", o.ctx,
              m.engine->config().max_position_embeddings,
              m.engine->prefix_size() ? fmt::format(" and a {}-token prefix", m.engine->prefix_size()) : "", maxc);
  if (o.alias.empty()) o.alias = default_alias(m.engine->path());
  for (int i = 0; i < o.parallel; ++i) {
    auto s = std::make_unique<Slot>();
    s->session = m.engine->new_session(o.ctx);
    m.free_slots.push_back(s.get());
    m.slots.push_back(std::move(s));
  }
  if (o.parallel > 1 && o.batch) {
    // Every session in one batch: Forward::step_batch keeps each row exact at any size (its linear
    // groups), and the batcher keeps the rows within the first one's buffers.
    m.batcher = std::make_unique<StepBatcher>(o.parallel, std::chrono::microseconds(o.batch_window_us));
  }
  m.routes();
}

Server::~Server() = default;

int64_t Server::ctx() const { return impl_->opt.ctx; }
const std::string& Server::alias() const { return impl_->opt.alias; }

int Server::bind() {
  Impl& m = *impl_;
  int port = m.opt.port;
  if (port == 0) {
    port = m.http.bind_to_any_port(m.opt.host);
    SINKQ_CHECK(port > 0, "--host {}: cannot bind a port there", m.opt.host);
  } else {
    SINKQ_CHECK(m.http.bind_to_port(m.opt.host, port),
                "--host {} --port {}: cannot listen there (in use, or not an address of this machine)", m.opt.host, port);
  }
  // Debian's libcpp-httplib is compiled with a listen backlog of 5: 100 clients connecting at once
  // overflowed it (kernel ListenOverflows) and saw connection resets. listen(2) again on the bound
  // socket sets the backlog (Linux; capped by net.core.somaxconn). The socket is the last one
  // httplib created: it closes those it could not bind and stops at the first that binds.
  if (m.listen_sock != INVALID_SOCKET)
    SINKQ_CHECK(::listen(m.listen_sock, SOMAXCONN) == 0, "--port {}: listen(2) with backlog {} failed", port, SOMAXCONN);
  return port;
}

void Server::run() {
  Impl& m = *impl_;
  m.run_active = true;
  if (!m.stopping) m.http.listen_after_bind();
  m.run_active = false;
}

void Server::stop() {
  Impl& m = *impl_;
  m.stopping = true;
  {
    std::lock_guard g(m.pool_mu);  // so a waiter cannot miss the flag between its check and its wait
  }
  m.pool_cv.notify_all();
  // httplib's stop() ends a listening loop only: when run() has begun but not yet listens, wait
  // for it to (run() sets run_active before it reads stopping, this reads them the other way
  // round, so one of the two sees the other).
  while (m.run_active && !m.http.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  m.http.stop();
}

json Server::Impl::model_json() const {
  return {{"id", opt.alias},
          {"object", "model"},
          {"created", created},
          {"owned_by", "sinkq"},
          {"meta",
           {{"path", engine->path()},
            {"runtime", engine->runtime_name()},
            {"describe", engine->describe()},
            {"ctx", opt.ctx},
            {"parallel", opt.parallel},
            {"vocab_size", engine->config().vocab_size},
            {"prefix_tokens", engine->prefix_tokens()},
            {"prefix", engine->prefix_json()}}}};
}

void Server::Impl::check_model(const std::string& requested) const {
  if (!requested.empty() && requested != opt.alias && requested != engine->path())
    throw ApiError(404, fmt::format("model '{}' is not served here (this server serves '{}')", requested, opt.alias),
                   "model", "model_not_found");
}

// The conversation's tokens after the engine's prefix (Engine::encode_chat); its errors are the
// client's: 400 naming "messages".
std::vector<int32_t> Server::Impl::chat_tokens(const ChatRequest& r) const {
  if (engine->tokenizer().chat_template().empty())
    throw ApiError(400, fmt::format("the model ({}) has no chat template: use /v1/completions with the prompt written out",
                                    opt.alias), "messages");
  try {
    return engine->encode_chat(r.messages);
  } catch (const Error& e) {
    throw ApiError(400, e.what(), "messages");
  }
}

namespace {

// The callbacks of a streamed generation; each returns false when the client is gone.
struct StreamHooks {
  // After the prefill, with the prompt's logprobs (echo + logprobs).
  std::function<bool(const ChoiceResult&)> on_prompt;
  // Text that became final, and the generated tokens [from, to) since the previous call.
  std::function<bool(const std::string&, const ChoiceResult&, size_t from, size_t to)> emit;
};

// Runs one generation on `slot`. Text goes out through hooks.emit as it becomes final: the stop
// strings hold back text that may still turn out to be one (it is never sent).
ChoiceResult run_choice(Server::Impl& m, Slot& slot, const std::vector<int32_t>& prompt, const Sampling& s,
                        const std::vector<int32_t>& extra_stop, bool prompt_logprobs, const StreamHooks& hooks) {
  const Engine& eng = *m.engine;
  GenerateOptions go;
  go.max_new_tokens = s.max_tokens;
  go.sampler = s.sampler;
  if (!s.seeded) go.sampler.seed = (uint64_t(std::random_device{}()) << 32) ^ std::random_device{}();
  if (!s.ignore_eos) {
    go.stop_ids = eng.stop_ids();
    go.stop_ids.insert(go.stop_ids.end(), extra_stop.begin(), extra_stop.end());
  }
  go.logprobs = s.logprobs;
  go.prompt_logprobs = prompt_logprobs;
  ChoiceResult out;
  if (prompt_logprobs)
    go.on_prompt_logprobs = [&](const std::vector<TokenLogprob>& v) {
      out.prompt_logprobs = v;
      if (hooks.on_prompt && !hooks.on_prompt(out)) out.client_gone = true;
    };
  StreamDecoder dec(eng.tokenizer());
  dec.prime(prompt);  // the completion continues the prompt's text (its leading space kept)
  StopMatcher stop(s.stop);
  size_t emitted = 0;  // generated tokens already reported through emit
  slot.tokens = int64_t(prompt.size());
  m.prompt_tokens += prompt.size();
  int64_t counted = 0;
  std::optional<StepBatcher::Membership> member;
  if (m.batcher) {
    member.emplace(*m.batcher);
    using BP = ServerOptions::BatchPrefill;
    const BP bp = m.opt.batch_prefill;
    if (bp == BP::All || (bp == BP::Short && int64_t(prompt.size()) <= matmul_rowwise_rows()))
      go.prefill = [&](Forward& f, std::span<const int32_t> p) { return member->prefill(f, p); };
    go.decode_step = [&](Forward& f, int32_t id) { return member->step(f, id); };
  }
  const GenerateResult g = slot.session->generate(prompt, go, [&](int32_t id, const TokenLogprob* lp) {
    // A client that closed its connection (streaming or not) ends the generation here.
    if (out.client_gone || GuardedHttpServer::client_gone()) {
      out.client_gone = true;
      return false;
    }
    out.ids.push_back(id);
    if (lp) out.logprobs.push_back(*lp);
    ++slot.tokens;
    if (++counted == 16) {
      m.count_tokens(counted);
      counted = 0;
    }
    const std::string piece = stop.push(dec.push(id));
    if (hooks.emit && !piece.empty()) {
      if (!hooks.emit(piece, out, emitted, out.ids.size())) {
        out.client_gone = true;
        return false;
      }
      emitted = out.ids.size();
    }
    return !stop.matched() && !m.stopping;
  });
  member.reset();  // no more steps: the other sessions' batches stop waiting for this one
  m.count_tokens(counted);
  m.prefill_us += uint64_t(g.prefill_seconds * 1e6);
  m.decode_us += uint64_t(g.decode_seconds * 1e6);
  if (!stop.matched() && !out.client_gone) {
    const std::string tail = stop.push(dec.flush()) + stop.flush();
    if (hooks.emit && (!tail.empty() || emitted < out.ids.size()) && !hooks.emit(tail, out, emitted, out.ids.size()))
      out.client_gone = true;
  }
  if (out.prompt_logprobs.empty()) out.prompt_logprobs = g.prompt_logprobs;
  out.stop_logprob = g.stop_logprob;
  out.text = stop.text();
  out.finish = stop.matched() || g.stopped ? "stop" : "length";
  if (out.client_gone) ++m.cancelled;
  return out;
}

// The completions API's logprobs object over (id, logprob) entries; a null logprob for the first
// prompt token (nothing before it in the request).
struct LpEntry {
  int32_t id;
  const TokenLogprob* lp;  // null: no logprob
};
json completion_logprobs(const Tokenizer& tok, const std::vector<LpEntry>& es) {
  json tokens = json::array(), lps = json::array(), tops = json::array(), offs = json::array();
  size_t off = 0;
  for (const LpEntry& e : es) {
    const std::string t = tok.token_text(e.id);
    tokens.push_back(t);
    offs.push_back(off);
    off += t.size();
    if (!e.lp) {
      lps.push_back(nullptr);
      tops.push_back(nullptr);
      continue;
    }
    lps.push_back(e.lp->logprob);
    json top = json::object();
    for (const auto& [id, lp] : e.lp->top) {
      const std::string k = tok.token_text(id);
      if (!top.contains(k)) top[k] = lp;  // two ids with one text: the more likely one
    }
    tops.push_back(std::move(top));
  }
  return {{"tokens", tokens}, {"token_logprobs", lps}, {"top_logprobs", tops}, {"text_offset", offs}};
}
std::vector<LpEntry> prompt_entries(const std::vector<int32_t>& prompt, const ChoiceResult& c) {
  std::vector<LpEntry> es;
  for (size_t k = 0; k < prompt.size(); ++k)
    es.push_back({prompt[k], k == 0 || k - 1 >= c.prompt_logprobs.size() ? nullptr : &c.prompt_logprobs[k - 1]});
  return es;
}
std::vector<LpEntry> generated_entries(const ChoiceResult& c, size_t from, size_t to) {
  std::vector<LpEntry> es;
  for (size_t k = from; k < to && k < c.logprobs.size(); ++k) es.push_back({c.logprobs[k].id, &c.logprobs[k]});
  return es;
}

json chat_logprobs(const Tokenizer& tok, const ChoiceResult& c, size_t from, size_t to) {
  auto entry = [&](int32_t id, double lp) {
    const std::string t = tok.token_text(id);
    return json{{"token", t}, {"logprob", lp}, {"bytes", std::vector<int>(t.begin(), t.end())}};
  };
  json content = json::array();
  for (size_t i = from; i < to && i < c.logprobs.size(); ++i) {
    json e = entry(c.logprobs[i].id, c.logprobs[i].logprob);
    json top = json::array();
    for (const auto& [id, lp] : c.logprobs[i].top) top.push_back(entry(id, lp));
    e["top_logprobs"] = std::move(top);
    content.push_back(std::move(e));
  }
  return {{"content", content}};
}

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }
std::string sse(const json& j) { return "data: " + dump(j) + "\n\n"; }
// Writes one server-sent event; false when the client is gone.
bool write_sse(httplib::DataSink& sink, const std::string& event) {
  return sink.is_writable() && sink.write(event.data(), event.size());
}

json usage(int64_t prompt, int64_t gen) {
  return {{"prompt_tokens", prompt}, {"completion_tokens", gen}, {"total_tokens", prompt + gen}};
}

// The end of a stream: the usage chunk when asked for (`last`: an envelope with no choices), then
// "[DONE]". False when the client is gone.
bool end_stream(httplib::DataSink& sink, json last, bool include_usage, json u) {
  if (include_usage) {
    last["usage"] = std::move(u);
    if (!write_sse(sink, sse(last))) return false;
  }
  if (!write_sse(sink, "data: [DONE]\n\n")) return false;
  sink.done();
  return true;
}

// The prompt (or conversation) must leave room for max_tokens in a session; -1 (chat without
// max_tokens): whatever is left.
int64_t resolve_max_tokens(int64_t max_tokens, size_t prompt, int64_t ctx, const std::string& where) {
  if (prompt == 0) throw ApiError(400, fmt::format("'{}' is empty (no tokens to condition on)", where), where);
  if (max_tokens < 0) {
    if (int64_t(prompt) >= ctx)
      throw ApiError(400, fmt::format("'{}' ({} tokens) leaves no room in the context of {} tokens (sinkq serve --ctx)",
                                      where, prompt, ctx), where, "context_length_exceeded");
    return ctx - int64_t(prompt);
  }
  if (int64_t(prompt) + max_tokens > ctx)
    throw ApiError(400, fmt::format("'{}' ({} tokens) + max_tokens ({}) = {} exceeds the context of {} tokens (sinkq serve --ctx)",
                                    where, prompt, max_tokens, int64_t(prompt) + max_tokens, ctx),
                   where, "context_length_exceeded");
  return max_tokens;
}

}  // namespace

// The request body, at most opt.max_body_bytes of it. Over the cap: 413. A chunked body over the
// cap is drained (not kept) up to 8× the cap so the client reads the 413 on a clean connection,
// as httplib does for a Content-Length over it; past that, reading stops and the connection's
// next bytes are a 400 and its end.
std::string Server::Impl::read_body(const httplib::Request& req, const httplib::ContentReader& reader,
                                    httplib::Response& res) const {
  // httplib hands a multipart body only to a multipart reader (none here): refuse it unread.
  if (req.is_multipart_form_data())
    throw ApiError(415, "the request body must be JSON (Content-Type: application/json), not multipart/form-data");
  std::string body;
  uint64_t seen = 0;
  const uint64_t drain = uint64_t(opt.max_body_bytes) * 8;
  const bool ok = reader([&](const char* data, size_t n) {
    seen += n;
    if (seen <= opt.max_body_bytes) body.append(data, n);
    return seen <= drain;
  });
  // res.status 413: httplib saw a Content-Length over set_payload_max_length and skipped the body.
  if (seen > opt.max_body_bytes || res.status == 413)
    throw ApiError(413, fmt::format("the request body exceeds {} bytes", opt.max_body_bytes));
  if (!ok) {
    if (const std::string late = expired_message(); !late.empty()) throw ApiError(408, late);
    throw ApiError(400, "the request body could not be read (malformed chunked encoding, or the client stopped sending)");
  }
  return body;
}

std::shared_ptr<Slot> Server::Impl::acquire_or_503() {
  std::shared_ptr<Slot> slot = acquire();
  if (!slot)
    throw ApiError(503, stopping ? "the server is shutting down" : "all sessions are busy and the queue is full; retry later", "",
                   "server_busy");
  return slot;
}

void Server::Impl::routes() {
  // SO_REUSEADDR alone: httplib's default adds SO_REUSEPORT, which lets a second server bind the
  // same port and silently take half of its connections.
  http.set_socket_options([this](socket_t sock) {
    listen_sock = sock;
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  http.set_payload_max_length(opt.max_body_bytes);
  // A thread per admitted connection and a few for the 503s beyond the cap (connection.h): none
  // waits in the pool's list behind slow clients.
  http.new_task_queue = [n = http.threads()] { return new httplib::ThreadPool(n); };

  http.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    // Framing that cannot be trusted (connection.h), answered before any body is read.
    if (std::string msg; const int status = GuardedHttpServer::framing_error(&msg)) {
      res.status = status;
      res.set_content(dump(error_body(ApiError(status, msg))), "application/json");
      count_request(req.path, status);
      return httplib::Server::HandlerResponse::Handled;
    }
    if (opt.api_key.empty() || req.path == "/health") return httplib::Server::HandlerResponse::Unhandled;
    if (constant_time_equal(req.get_header_value("Authorization"), "Bearer " + opt.api_key))
      return httplib::Server::HandlerResponse::Unhandled;
    const ApiError e(401, "a valid API key is required: send 'Authorization: Bearer KEY' (sinkq serve --api-key)", "",
                     "authentication_error");
    res.status = 401;
    res.set_content(dump(error_body(e)), "application/json");
    count_request(req.path, 401);
    return httplib::Server::HandlerResponse::Handled;
  });
  http.set_error_handler([this](const httplib::Request& req, httplib::Response& res) {
    // 404 for unknown paths, 413 for a body over the limit: OpenAI's error object either way.
    if (!res.body.empty()) return;
    // httplib answers a head that stopped arriving with 400; it was the deadline (connection.h).
    if (const std::string late = expired_message(); !late.empty()) {
      res.status = 408;
      res.set_content(dump(error_body(ApiError(408, late))), "application/json");
      count_request("unknown", 408);
      return;
    }
    const std::string msg =
        res.status == 404   ? fmt::format("no endpoint {} {}", req.method, req.path)
        : res.status == 413 ? fmt::format("the request body exceeds {} bytes", opt.max_body_bytes)
        : res.status == 414 ? "the request line is longer than 8 KiB"
        : res.status == 400 ? "the request could not be parsed: a malformed request line, header or chunk, or a header "
                              "line over 8 KiB"
                            : fmt::format("HTTP {}", res.status);
    // After a request httplib could not parse, where the next one starts is unknown: close.
    if (res.status == 400 || res.status == 413 || res.status == 414) GuardedHttpServer::close_after_response();
    res.set_content(dump(error_body(ApiError(res.status, msg))), "application/json");
    count_request(res.status == 404 ? "unknown" : req.path, res.status);
  });
  // "Expect: 100-continue" with framing the server refuses (a Content-Length over the cap, ...):
  // the refusal instead of "100 Continue", so the client does not send the body.
  http.set_expect_100_continue_handler([this](const httplib::Request& req, httplib::Response& res) {
    std::string msg;
    const int status = GuardedHttpServer::framing_error(&msg);
    if (status == 0) return 100;
    res.status = status;
    res.set_content(dump(error_body(ApiError(status, msg))), "application/json");
    count_request(req.path, status);
    return status;
  });

  // Runs a handler: ApiError → its status and error object; sinkq::Error from computing → 500
  // with sinkq's message; the request counted and logged.
  auto run = [this](const std::string& endpoint, const httplib::Request& req, httplib::Response& res,
                    const std::function<void()>& f) {
    const auto t0 = clock_type::now();
    res.status = 200;
    try {
      f();
    } catch (const ApiError& e) {
      res.status = e.status;
      if (e.status == 503) res.set_header("Retry-After", "1");
      res.set_content(dump(error_body(e)), "application/json");
    } catch (const std::exception& e) {
      res.status = 500;
      res.set_content(dump(error_body(ApiError(500, e.what(), "", "server_error"))), "application/json");
    }
    count_request(endpoint, res.status);
    if (opt.log_requests)
      std::fprintf(stderr, "[serve] %s %s %d %.0f ms%s\n", req.method.c_str(), req.path.c_str(), res.status,
                   seconds_since(t0) * 1e3, res.get_header_value("Content-Type") == "text/event-stream" ? " (stream starts)" : "");
  };
  auto wrap = [run](const std::string& endpoint, std::function<void(const httplib::Request&, httplib::Response&)> f) {
    return [run, endpoint, f = std::move(f)](const httplib::Request& req, httplib::Response& res) {
      run(endpoint, req, res, [&] { f(req, res); });
    };
  };
  // POST endpoints read their body through a content reader with the byte cap: httplib 0.11 holds
  // set_payload_max_length against Content-Length only, so a chunked or length-less body was read
  // whole into memory (a 64 MiB chunked body cost 85 MiB before any answer).
  auto post = [this, run](const std::string& endpoint,
                          std::function<void(const std::string&, httplib::Response&)> f) {
    http.Post(endpoint, [this, run, endpoint, f = std::move(f)](const httplib::Request& req, httplib::Response& res,
                                                                const httplib::ContentReader& reader) {
      run(endpoint, req, res, [&] { f(read_body(req, reader, res), res); });
    });
  };

  http.Get("/health", wrap("/health", [this](const httplib::Request&, httplib::Response& res) {
    size_t free_n;
    {
      std::lock_guard g(pool_mu);
      free_n = free_slots.size();
    }
    res.status = stopping ? 503 : 200;
    res.set_content(dump({{"status", stopping ? "shutting down" : "ok"}, {"sessions_free", free_n}, {"parallel", opt.parallel}}),
                    "application/json");
  }));
  http.Get("/v1/models", wrap("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(dump({{"object", "list"}, {"data", json::array({model_json()})}}), "application/json");
  }));
  http.Get("/metrics", wrap("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics_text(), "text/plain; version=0.0.4");
  }));
  http.Get("/tokenizer_info", wrap("/tokenizer_info", [this](const httplib::Request&, httplib::Response& res) {
    const Tokenizer& tok = engine->tokenizer();
    auto name = [&](int id) { return id >= 0 ? json(tok.token_text(id)) : json(nullptr); };
    res.set_content(dump({{"eos_token", name(tok.eos_id())},
                          {"bos_token", name(tok.bos_id())},
                          {"pad_token", nullptr},
                          {"add_bos_token", tok.add_bos()},
                          {"chat_template", tok.chat_template()},
                          {"model_max_length", opt.ctx},
                          {"vocab_size", tok.vocab_size()}}),
                    "application/json");
  }));
  post("/tokenize", [this](const std::string& body, httplib::Response& res) {
    const TokenizeRequest r = parse_tokenize(body);
    EncodeOptions eo;
    eo.add_special = r.add_special;
    res.set_content(dump({{"tokens", engine->tokenizer().encode(r.text, eo)}}), "application/json");
  });
  post("/detokenize", [this](const std::string& body, httplib::Response& res) {
    const std::vector<int32_t> ids = parse_detokenize(body, engine->config().vocab_size);
    res.set_content(dump({{"prompt", engine->tokenizer().decode(ids, /*skip_special=*/false)}}), "application/json");
  });

  // ---- /v1/completions ----
  post("/v1/completions", [this](const std::string& body, httplib::Response& res) {
    auto r = std::make_shared<CompletionRequest>(parse_completion(body, engine->config().vocab_size));
    check_model(r->model);
    auto prompts = std::make_shared<std::vector<std::vector<int32_t>>>();
    for (size_t i = 0; i < r->prompts.size(); ++i) {
      const Prompt& p = r->prompts[i];
      prompts->push_back(p.text ? engine->encode_prompt(*p.text) : p.ids);
      resolve_max_tokens(r->s.max_tokens, prompts->back().size(), opt.ctx,
                         r->prompts.size() > 1 ? fmt::format("prompt[{}]", i) : "prompt");
    }
    std::shared_ptr<Slot> slot = acquire_or_503();
    const std::string id = fmt::format("cmpl-{}", next_id++);
    const bool want_lp = r->s.logprobs >= 0;
    const Tokenizer& tok = engine->tokenizer();
    // The echoed prompt: the client's text, or its ids decoded.
    auto prompt_text = [r, prompts, &tok](size_t i) {
      return r->prompts[i].text ? *r->prompts[i].text : tok.decode((*prompts)[i], /*skip_special=*/false);
    };
    if (!r->s.stream) {
      json choices = json::array();
      int64_t n_prompt = 0, n_gen = 0;
      for (size_t i = 0; i < prompts->size(); ++i) {
        const std::vector<int32_t>& p = (*prompts)[i];
        const ChoiceResult c = run_choice(*this, *slot, p, r->s, {}, r->echo && want_lp, {});
        json lp = nullptr;
        if (want_lp) {
          std::vector<LpEntry> es = r->echo ? prompt_entries(p, c) : std::vector<LpEntry>{};
          const std::vector<LpEntry> g = generated_entries(c, 0, c.ids.size());
          es.insert(es.end(), g.begin(), g.end());
          // The stop token too (its logprob, no text), as vLLM lists it: lm-eval's loglikelihood
          // reads token_logprobs[ctxlen:-1] of an echo with max_tokens 1, i.e. expects
          // len(prompt) + 1 entries even when the one sampled token is EOS.
          if (c.stop_logprob) es.push_back({c.stop_logprob->id, &*c.stop_logprob});
          lp = completion_logprobs(tok, es);
        }
        choices.push_back({{"text", r->echo ? prompt_text(i) + c.text : c.text},
                           {"index", i},
                           {"logprobs", lp},
                           {"finish_reason", c.finish}});
        n_prompt += int64_t(p.size());
        n_gen += int64_t(c.ids.size());
      }
      json body = envelope(id, "text_completion", std::move(choices));
      body["usage"] = usage(n_prompt, n_gen);
      res.set_content(dump(body), "application/json");
      return;
    }
    // Streaming: the generation runs in the content provider (on this thread, after the handler
    // returns), which holds the session until it ends or the client goes away.
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider("text/event-stream", [this, r, prompts, slot, id, want_lp, prompt_text](
                                                             size_t, httplib::DataSink& sink) {
      const Tokenizer& tok = engine->tokenizer();
      auto chunk = [&](size_t i, const std::string& text, json lp, json finish) {
        return sse(envelope(id, "text_completion",
                            json::array({{{"text", text}, {"index", i}, {"logprobs", lp}, {"finish_reason", finish}}})));
      };
      int64_t n_prompt = 0, n_gen = 0;
      for (size_t i = 0; i < prompts->size(); ++i) {
        const std::vector<int32_t>& p = (*prompts)[i];
        if (r->echo && !want_lp && !write_sse(sink, chunk(i, prompt_text(i), nullptr, nullptr))) return false;
        StreamHooks h;
        if (r->echo && want_lp)
          h.on_prompt = [&](const ChoiceResult& c) {
            return write_sse(sink, chunk(i, prompt_text(i), completion_logprobs(tok, prompt_entries(p, c)), nullptr));
          };
        h.emit = [&](const std::string& text, const ChoiceResult& c, size_t from, size_t to) {
          json lp = want_lp ? completion_logprobs(tok, generated_entries(c, from, to)) : json(nullptr);
          return write_sse(sink, chunk(i, text, std::move(lp), nullptr));
        };
        const ChoiceResult c = run_choice(*this, *slot, p, r->s, {}, r->echo && want_lp, h);
        if (c.client_gone || !write_sse(sink, chunk(i, "", nullptr, c.finish))) return false;
        n_prompt += int64_t(p.size());
        n_gen += int64_t(c.ids.size());
      }
      return end_stream(sink, envelope(id, "text_completion", json::array()), r->s.include_usage, usage(n_prompt, n_gen));
    });
  });

  // ---- /v1/chat/completions ----
  post("/v1/chat/completions", [this](const std::string& body, httplib::Response& res) {
    auto r = std::make_shared<ChatRequest>(parse_chat(body));
    check_model(r->model);
    auto prompt = std::make_shared<std::vector<int32_t>>(chat_tokens(*r));
    r->s.max_tokens = resolve_max_tokens(r->s.max_tokens, prompt->size(), opt.ctx, "messages");
    std::vector<int32_t> end_turn;
    if (const int32_t t = engine->end_of_turn_id(); t >= 0) end_turn.push_back(t);
    std::shared_ptr<Slot> slot = acquire_or_503();
    const std::string id = fmt::format("chatcmpl-{}", next_id++);
    const bool want_lp = r->s.logprobs >= 0;
    const Tokenizer& tok = engine->tokenizer();
    if (!r->s.stream) {
      const ChoiceResult c = run_choice(*this, *slot, *prompt, r->s, end_turn, false, {});
      json body = envelope(id, "chat.completion",
                           json::array({{{"index", 0},
                                         {"message", {{"role", "assistant"}, {"content", c.text}}},
                                         {"logprobs", want_lp ? chat_logprobs(tok, c, 0, c.ids.size()) : json(nullptr)},
                                         {"finish_reason", c.finish}}}));
      body["usage"] = usage(int64_t(prompt->size()), int64_t(c.ids.size()));
      res.set_content(dump(body), "application/json");
      return;
    }
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider("text/event-stream", [this, r, prompt, slot, id, want_lp, end_turn](
                                                             size_t, httplib::DataSink& sink) {
      const Tokenizer& tok = engine->tokenizer();
      auto chunk = [&](json delta, json lp, json finish) {
        return sse(envelope(id, "chat.completion.chunk",
                            json::array({{{"index", 0}, {"delta", delta}, {"logprobs", lp}, {"finish_reason", finish}}})));
      };
      if (!write_sse(sink, chunk({{"role", "assistant"}, {"content", ""}}, nullptr, nullptr))) return false;
      StreamHooks h;
      h.emit = [&](const std::string& text, const ChoiceResult& c, size_t from, size_t to) {
        return write_sse(sink, chunk({{"content", text}}, want_lp ? chat_logprobs(tok, c, from, to) : json(nullptr), nullptr));
      };
      const ChoiceResult c = run_choice(*this, *slot, *prompt, r->s, end_turn, false, h);
      if (c.client_gone || !write_sse(sink, chunk(json::object(), nullptr, c.finish))) return false;
      return end_stream(sink, envelope(id, "chat.completion.chunk", json::array()), r->s.include_usage,
                        usage(int64_t(prompt->size()), int64_t(c.ids.size())));
    });
  });
}

std::string Server::Impl::metrics_text() {
  std::string o;
  auto metric = [&](const char* name, const char* type, const char* help) {
    o += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
  };
  metric("sinkq_requests_total", "counter", "HTTP requests answered, by endpoint and status");
  {
    std::lock_guard g(metrics_mu);
    for (const auto& [k, n] : requests) o += fmt::format("sinkq_requests_total{{endpoint=\"{}\",status=\"{}\"}} {}\n", k.first, k.second, n);
  }
  metric("sinkq_prompt_tokens_total", "counter", "prompt tokens prefilled");
  o += fmt::format("sinkq_prompt_tokens_total {}\n", prompt_tokens.load());
  metric("sinkq_generated_tokens_total", "counter", "tokens generated");
  o += fmt::format("sinkq_generated_tokens_total {}\n", generated_tokens.load());
  metric("sinkq_prefill_seconds_total", "counter", "time spent prefilling prompts (summed over sessions)");
  o += fmt::format("sinkq_prefill_seconds_total {:.6f}\n", double(prefill_us.load()) * 1e-6);
  metric("sinkq_decode_seconds_total", "counter", "time spent generating (summed over sessions)");
  o += fmt::format("sinkq_decode_seconds_total {:.6f}\n", double(decode_us.load()) * 1e-6);
  metric("sinkq_cancelled_total", "counter", "generations ended early because the client went away");
  o += fmt::format("sinkq_cancelled_total {}\n", cancelled.load());
  if (batcher) {
    const StepBatcher::Stats st = batcher->stats();
    const std::tuple<const char*, const char*, uint64_t> counters[] = {
        {"sinkq_batches_total", "batched forwards run (continuous batching across sessions)", st.batches},
        {"sinkq_decode_batches_total", "batched forwards with a decode step", st.decode_batches},
        {"sinkq_decode_batch_rows_total", "session decode steps run in those batches (÷ decode batches: mean decode batch)", st.rows},
        {"sinkq_prefill_batch_chunks_total", "prompt chunks run in batched forwards", st.prefill_chunks},
        {"sinkq_prefill_batch_tokens_total", "prompt tokens in those chunks", st.prefill_rows},
        {"sinkq_mixed_batches_total", "batched forwards with both a prompt chunk and a decode step", st.mixed}};
    for (const auto& [name, help, value] : counters) {
      metric(name, "counter", help);
      o += fmt::format("{} {}\n", name, value);
    }
  }
  double tps;
  {
    std::lock_guard g(metrics_mu);
    const auto now = clock_type::now();
    while (!recent.empty() && now - recent.front().first > std::chrono::seconds(10)) recent.pop_front();
    int64_t n = 0;
    for (const auto& e : recent) n += e.second;
    tps = double(n) / 10.0;
  }
  metric("sinkq_tokens_per_second", "gauge", "tokens generated per second over the last 10 s (all sessions)");
  o += fmt::format("sinkq_tokens_per_second {:.3f}\n", tps);
  size_t busy, queued;
  {
    std::lock_guard g(pool_mu);
    busy = slots.size() - free_slots.size();
    queued = size_t(waiting);
  }
  metric("sinkq_connections_open", "gauge", "client connections open (--max-connections)");
  o += fmt::format("sinkq_connections_open {}\n", http.open_connections());
  metric("sinkq_connections_refused_total", "counter", "connections answered 503 at once because --max-connections were open");
  o += fmt::format("sinkq_connections_refused_total {}\n", http.refused_connections());
  metric("sinkq_requests_timed_out_total", "counter", "requests not received within --header-timeout / --request-timeout");
  o += fmt::format("sinkq_requests_timed_out_total {}\n", http.expired_requests());
  metric("sinkq_queue_depth", "gauge", "requests waiting for a session");
  o += fmt::format("sinkq_queue_depth {}\n", queued);
  metric("sinkq_sessions_busy", "gauge", "sessions computing a request");
  o += fmt::format("sinkq_sessions_busy {}\n", busy);
  metric("sinkq_sessions", "gauge", "sessions (--parallel)");
  o += fmt::format("sinkq_sessions {}\n", slots.size());
  size_t alloc = 0;
  double used = 0;
  for (const auto& s : slots) {
    const size_t b = s->session->kv_bytes();
    alloc += b;
    used += double(b) * double(s->tokens.load()) / double(opt.ctx);
  }
  metric("sinkq_kv_bytes_allocated", "gauge", "KV cache memory held by the sessions (their full context)");
  o += fmt::format("sinkq_kv_bytes_allocated {}\n", alloc);
  metric("sinkq_kv_bytes_in_use", "gauge", "KV cache memory holding tokens of requests now");
  o += fmt::format("sinkq_kv_bytes_in_use {:.0f}\n", used);
  return o;
}

}  // namespace sinkq::server
