// sinkq serve over HTTP (a real socket on 127.0.0.1, cpp-httplib's client): completions equal
// Session::generate for the same seed; echo + logprobs equal Session::logprobs bit for bit (what
// lm-eval's loglikelihood reads); streams concatenate to the non-streamed text; chat renders the
// model's template and stops at its end-of-turn token; the IntactKV[P] system prompt is the
// engine's prefix; a full queue answers 503, a client that goes away frees its session, a bad
// request is a 400 naming the field; stop() ends in-flight streams and run() returns; the CLI
// exits 0 on SIGTERM.
#include "server/server.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <future>
#include <thread>

#include "calib/prefix.h"
#include "kernels/ops.h"
#include "sinkq/engine.h"
#include "server/running.h"
#include "util/testutil.h"

namespace sinkq::server {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

// The events of a server-sent-event body ("data: {...}\n\n" ... "data: [DONE]\n\n").
std::vector<json> events(const std::string& body, bool* done) {
  std::vector<json> out;
  *done = false;
  size_t at = 0;
  while (at < body.size()) {
    const size_t end = body.find("\n\n", at);
    EXPECT_NE(end, std::string::npos) << "an event without its blank line";
    if (end == std::string::npos) break;
    const std::string ev = body.substr(at, end - at);
    EXPECT_EQ(ev.rfind("data: ", 0), 0u) << ev;
    if (ev == "data: [DONE]") *done = true;
    else out.push_back(json::parse(ev.substr(6)));
    at = end + 2;
  }
  return out;
}

// POSTs `body` and hands each piece of the response body to on_data as it arrives (false: hang up).
httplib::Result post_streaming(httplib::Client& c, const std::string& path, const std::string& body,
                               std::function<bool(const char*, size_t)> on_data) {
  httplib::Request req;
  req.method = "POST";
  req.path = path;
  req.body = body;
  req.set_header("Content-Type", "application/json");
  req.content_receiver = [on_data](const char* d, size_t n, uint64_t, uint64_t) { return on_data(d, n); };
  return c.send(req);
}

// The text `gen` adds after `prompt`, as an echo would show it (a leading space kept).
std::string continuation(const Engine& e, const std::vector<int32_t>& prompt, const std::vector<int32_t>& gen) {
  std::vector<int32_t> all = prompt;
  all.insert(all.end(), gen.begin(), gen.end());
  const std::string p = e.tokenizer().decode(prompt), a = e.tokenizer().decode(all);
  EXPECT_EQ(a.rfind(p, 0), 0u);
  return a.substr(p.size());
}

std::vector<int32_t> reference_generate(const Engine& e, const std::vector<int32_t>& prompt, int64_t n, SamplerOptions so,
                                        std::vector<int32_t> extra_stop = {}) {
  auto s = e.new_session(256);
  GenerateOptions go;
  go.max_new_tokens = n;
  go.sampler = so;
  go.stop_ids = e.stop_ids();
  go.stop_ids.insert(go.stop_ids.end(), extra_stop.begin(), extra_stop.end());
  return s->generate(prompt, go).generated;
}

TEST(Server, CompletionsEqualGenerate) {
  const auto& e = stories_engine();
  ServerOptions o;
  o.ctx = 256;
  Running r(e, o);
  const std::string prompt = "Once upon a time";
  const std::vector<int32_t> ids = e->encode_prompt(prompt);
  for (const auto& [temp, seed] : std::vector<std::pair<float, uint64_t>>{{0.0f, 0}, {0.8f, 7}, {1.0f, 123456789}}) {
    SamplerOptions so;
    so.temperature = temp;
    so.top_k = temp > 0.9f ? 0 : 40;
    so.seed = seed;
    const std::vector<int32_t> want = reference_generate(*e, ids, 40, so);
    const json j = r.post("/v1/completions", {{"prompt", prompt}, {"max_tokens", 40}, {"temperature", temp},
                                              {"top_k", so.top_k}, {"seed", seed}});
    EXPECT_EQ(j["choices"][0]["text"], continuation(*e, ids, want)) << temp;
    EXPECT_EQ(j["usage"]["completion_tokens"], want.size());
    EXPECT_EQ(j["usage"]["prompt_tokens"], ids.size());
    EXPECT_EQ(j["object"], "text_completion");
    EXPECT_EQ(j["choices"][0]["finish_reason"], want.size() == 40 ? "length" : "stop");
    // Token-id prompts are the same request.
    const json k = r.post("/v1/completions", {{"prompt", ids}, {"max_tokens", 40}, {"temperature", temp},
                                              {"top_k", so.top_k}, {"seed", seed}});
    EXPECT_EQ(k["choices"][0]["text"], j["choices"][0]["text"]);
  }
  // A list of prompts: one choice each, in order.
  const json m = r.post("/v1/completions", {{"prompt", {"Once upon a time", "The cat"}}, {"max_tokens", 5}, {"temperature", 0}});
  ASSERT_EQ(m["choices"].size(), 2u);
  EXPECT_EQ(m["choices"][1]["index"], 1);
  const std::vector<int32_t> cat = e->encode_prompt("The cat");
  EXPECT_EQ(m["choices"][1]["text"], continuation(*e, cat, reference_generate(*e, cat, 5, {0.0f})));
}

// Continuous batching (--parallel 3, server/batcher.h): concurrent requests prefill and decode in
// shared steps (Forward::step_batch) and each still gets exactly the tokens it gets alone, greedy and
// seeded; /metrics shows that steps were shared (rows > batches). SmolLM2 so that the requests
// overlap (~40 ms a step, 24 steps each); a fourth request waits in the queue and joins later.
TEST(Server, ConcurrentRequestsShareDecodeStepsAndStayExact) {
  const auto& e = smol_engine();
  // --batch-prefill short (the default: prompts of at most matmul_rowwise_rows() tokens, here all
  // on AVX2 / AVX-512) and all: the prompts ride in the batches too, and a request's tokens are
  // still their own.
  for (const auto mode : {ServerOptions::BatchPrefill::Short, ServerOptions::BatchPrefill::All}) {
    SCOPED_TRACE(mode == ServerOptions::BatchPrefill::All ? "--batch-prefill all" : "--batch-prefill short");
    ServerOptions o;
    o.ctx = 128;
    o.parallel = 3;
    o.batch_prefill = mode;
    o.batch_window_us = 50000;  // a loaded CI host may take more than 2 ms between a session's steps
    Running r(e, o);
    struct Req {
      std::string prompt;
      float temperature;
      uint64_t seed;
    };
    const std::vector<Req> reqs = {{"The capital of France is", 0.0f, 0},
                                   {"Once upon a time, in a small village,", 0.8f, 7},
                                   {"def fibonacci(n):\n", 0.0f, 0},
                                   {"The three primary colors are", 1.0f, 99}};
    static constexpr int n = 24;
    std::vector<std::future<json>> got;
    for (const Req& q : reqs)
      got.push_back(std::async(std::launch::async, [&r, q] {
        return r.post("/v1/completions", {{"prompt", q.prompt}, {"max_tokens", n}, {"temperature", q.temperature}, {"seed", q.seed}});
      }));
    double steps = 0;  // decode steps the requests needed: one per emitted token but the n-th
    double batched = 0;  // prompts that go through the batcher
    for (size_t i = 0; i < reqs.size(); ++i) {
      SamplerOptions so;
      so.temperature = reqs[i].temperature;
      so.seed = reqs[i].seed;
      const std::vector<int32_t> ids = e->encode_prompt(reqs[i].prompt);
      batched += mode == ServerOptions::BatchPrefill::All || int64_t(ids.size()) <= matmul_rowwise_rows();
      const json j = got[i].get();
      EXPECT_EQ(j["choices"][0]["text"], continuation(*e, ids, reference_generate(*e, ids, n, so))) << reqs[i].prompt;
      const int emitted = j["usage"]["completion_tokens"].get<int>();
      steps += emitted - (emitted == n ? 1 : 0);
    }
    const std::string m = r.get("/metrics").get<std::string>();
    auto value = [&](const std::string& name) {
      const size_t at = m.find("\n" + name + " ");
      EXPECT_NE(at, std::string::npos) << name;
      return at == std::string::npos ? 0.0 : std::stod(m.substr(at + name.size() + 2));
    };
    const double batches = value("sinkq_decode_batches_total"), rows = value("sinkq_decode_batch_rows_total");
    EXPECT_GT(batches, 0);
    EXPECT_GT(rows, batches) << "no decode step was shared by two sessions";
    EXPECT_EQ(rows, steps) << "every decode step of every request went through the batcher, once";
    EXPECT_EQ(value("sinkq_prefill_batch_chunks_total"), batched) << "the prompts that go through the batcher did";
    EXPECT_GT(batched, 0);
  }
}

// lm-eval's loglikelihood request: echo, logprobs 1, max_tokens 1, token ids. token_logprobs[1..]
// are Session::logprobs bit for bit (one scoring path, and doubles survive JSON's 17 digits), the
// first is null, and a greedy token's logprob equals the maximum of its top_logprobs.
TEST(Server, EchoLogprobsAreTheSessionsLogprobs) {
  const auto& e = smol_engine();
  ServerOptions o;
  o.ctx = 128;
  Running r(e, o);
  const std::vector<int32_t> ids = e->encode_prompt("The capital of France is Paris, and the capital of Italy is Rome.");
  auto s = e->new_session(128);
  const std::vector<TokenLogprob> want = s->score(ids, 1, 3);
  for (int max_tokens : {0, 1}) {
    const json j = r.post("/v1/completions", {{"prompt", {ids}}, {"max_tokens", max_tokens}, {"echo", true},
                                              {"logprobs", 3}, {"temperature", 0}, {"seed", 1234}});
    const json& lp = j["choices"][0]["logprobs"];
    ASSERT_EQ(lp["token_logprobs"].size(), ids.size() + size_t(max_tokens));
    EXPECT_TRUE(lp["token_logprobs"][0].is_null());
    EXPECT_TRUE(lp["top_logprobs"][0].is_null());
    for (size_t i = 1; i < ids.size(); ++i) {
      EXPECT_EQ(lp["token_logprobs"][i].get<double>(), want[i - 1].logprob) << i;
      double top_max = -1e300;
      for (const auto& [k, v] : lp["top_logprobs"][i].items()) top_max = std::max(top_max, v.get<double>());
      EXPECT_EQ(top_max, want[i - 1].top[0].second) << i;
      EXPECT_EQ(lp["tokens"][i], e->tokenizer().token_text(ids[i]));
    }
    EXPECT_EQ(j["choices"][0]["text"].get<std::string>().rfind(e->tokenizer().decode(ids, false), 0), 0u);
  }
  // A prompt whose greedy next token is a stop id (<|im_end|> after a finished answer): the stop
  // token is still listed (logprob, no text), so lm-eval's token_logprobs[ctxlen:-1] keeps every
  // continuation token.
  const std::vector<int32_t> done = e->tokenizer().encode(
      render_chat(e->tokenizer().chat_template(), "t", {{"user", "What is 2+2?"}}, true) + "The answer is 4.",
      EncodeOptions{.add_special = false});
  const json j = r.post("/v1/completions", {{"prompt", {done}}, {"max_tokens", 1}, {"echo", true}, {"logprobs", 1},
                                            {"temperature", 0}});
  ASSERT_EQ(j["choices"][0]["finish_reason"], "stop") << "the model should end its turn here";
  const json& lp = j["choices"][0]["logprobs"];
  ASSERT_EQ(lp["token_logprobs"].size(), done.size() + 1);
  const std::vector<TokenLogprob> sc = s->score(done, 1, 0);
  EXPECT_EQ(lp["token_logprobs"][done.size() - 1].get<double>(), sc.back().logprob);  // the last prompt token
}

TEST(Server, StreamsConcatenateToTheCompletion) {
  const auto& e = stories_engine();
  ServerOptions o;
  o.ctx = 256;
  Running r(e, o);
  const json req = {{"prompt", "Once upon a time"}, {"max_tokens", 60}, {"temperature", 0.7}, {"seed", 3}, {"logprobs", 1}};
  const json whole = r.post("/v1/completions", req);
  json sreq = req;
  sreq["stream"] = true;
  sreq["stream_options"] = {{"include_usage", true}};
  auto res = r.client().Post("/v1/completions", sreq.dump(), "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_THAT(res->get_header_value("Content-Type"), HasSubstr("text/event-stream"));
  bool done = false;
  const std::vector<json> evs = events(res->body, &done);
  EXPECT_TRUE(done);
  ASSERT_GE(evs.size(), 3u);
  std::string text;
  size_t n_lp = 0;
  for (size_t i = 0; i + 2 < evs.size(); ++i) {
    text += evs[i]["choices"][0]["text"].get<std::string>();
    EXPECT_TRUE(evs[i]["choices"][0]["finish_reason"].is_null());
    n_lp += evs[i]["choices"][0]["logprobs"]["tokens"].size();
  }
  EXPECT_EQ(text, whole["choices"][0]["text"]);
  EXPECT_EQ(n_lp, whole["choices"][0]["logprobs"]["tokens"].size());
  EXPECT_EQ(evs[evs.size() - 2]["choices"][0]["finish_reason"], whole["choices"][0]["finish_reason"]);
  EXPECT_EQ(evs.back()["usage"], whole["usage"]);

  // Stop strings: the text ends before the first occurrence, in both forms.
  const std::string full = whole["choices"][0]["text"];
  const size_t cut = full.find(' ', 10);
  ASSERT_NE(cut, std::string::npos);
  const std::string stop = full.substr(cut, 3);
  json st = req;
  st["stop"] = {stop};
  const json stopped = r.post("/v1/completions", st);
  EXPECT_EQ(stopped["choices"][0]["text"], full.substr(0, full.find(stop)));
  EXPECT_EQ(stopped["choices"][0]["finish_reason"], "stop");
  st["stream"] = true;
  res = r.client().Post("/v1/completions", st.dump(), "application/json");
  ASSERT_TRUE(res);
  std::string streamed;
  for (const json& ev : events(res->body, &done)) streamed += ev["choices"][0]["text"].get<std::string>();
  EXPECT_EQ(streamed, stopped["choices"][0]["text"]);
}

// Chat: the conversation rendered by the model's template (SmolLM2's ChatML with its default
// system turn), generation stopped at <|im_end|>; the same tokens through Session::generate.
TEST(Server, ChatUsesTheTemplateAndStopsAtEndOfTurn) {
  const auto& e = smol_engine();
  ServerOptions o;
  o.ctx = 256;
  Running r(e, o);
  const std::vector<ChatMessage> msgs = {{"user", "What is the capital of France?"}};
  const std::string rendered = render_chat(e->tokenizer().chat_template(), "t", msgs, true);
  EXPECT_THAT(rendered, HasSubstr("You are a helpful AI assistant named SmolLM"));
  const std::vector<int32_t> ids = e->tokenizer().encode(rendered, EncodeOptions{.add_special = false});
  const int32_t im_end = e->tokenizer().token_to_id("<|im_end|>");
  ASSERT_GE(im_end, 0);
  const std::vector<int32_t> want = reference_generate(*e, ids, 48, {0.0f}, {im_end});
  const json j = r.post("/v1/chat/completions", {{"messages", {{{"role", "user"}, {"content", msgs[0].content}}}},
                                                 {"max_tokens", 48}, {"temperature", 0}});
  EXPECT_EQ(j["choices"][0]["message"]["content"], continuation(*e, ids, want));
  EXPECT_EQ(j["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(j["usage"]["prompt_tokens"], ids.size());
  EXPECT_EQ(j["choices"][0]["finish_reason"], want.size() < 48 ? "stop" : "length");
  EXPECT_LT(want.size(), 48u) << "SmolLM2 answers this in a few tokens and ends its turn";

  json sreq = {{"messages", {{{"role", "user"}, {"content", msgs[0].content}}}}, {"max_tokens", 48}, {"temperature", 0},
               {"stream", true}, {"logprobs", true}, {"top_logprobs", 2}};
  auto res = r.client().Post("/v1/chat/completions", sreq.dump(), "application/json");
  ASSERT_TRUE(res);
  bool done = false;
  std::string text;
  for (const json& ev : events(res->body, &done)) {
    EXPECT_EQ(ev["object"], "chat.completion.chunk");
    const json& d = ev["choices"][0]["delta"];
    if (d.contains("content")) text += d["content"].get<std::string>();
    if (!ev["choices"][0]["logprobs"].is_null()) {
      for (const json& t : ev["choices"][0]["logprobs"]["content"]) EXPECT_EQ(t["top_logprobs"].size(), 2u);
    }
  }
  EXPECT_TRUE(done);
  EXPECT_EQ(text, j["choices"][0]["message"]["content"]);

  // stories260K has no chat template: a clear 400, not a guess.
  Running s(stories_engine(), o);
  const json err = s.post("/v1/chat/completions", {{"messages", {{{"role", "user"}, {"content", "hi"}}}}}, 400);
  EXPECT_THAT(err["error"]["message"].get<std::string>(), HasSubstr("no chat template"));
}

// IntactKV[P]: the system prompt is the engine's fp prefix, computed once; a conversation with
// that system message (or none) feeds only the rest, and answers as the whole conversation run
// through a session behind the same prefix; another system message is refused.
TEST(Server, SystemPromptPrefixIsShared) {
  OpenOptions oo;
  oo.recipe = quant::Recipe::from_preset("fp16");
  const std::string sys = "You are a concise assistant.";
  oo.recipe->prefix.spec = "system:" + sys;
  const auto e = Engine::open(smol(), oo);
  ASSERT_GT(e->prefix_size(), 3);
  ServerOptions o;
  o.ctx = 256;
  Running r(e, o);
  const std::vector<ChatMessage> msgs = {{"system", sys}, {"user", "Name a color."}};
  const std::vector<int32_t> all =
      e->tokenizer().encode(render_chat(e->tokenizer().chat_template(), "t", msgs, true), EncodeOptions{.add_special = false});
  ASSERT_TRUE(std::equal(e->prefix_tokens().begin(), e->prefix_tokens().end(), all.begin()));
  const std::vector<int32_t> body(all.begin() + e->prefix_size(), all.end());
  const std::vector<int32_t> want = reference_generate(*e, body, 16, {0.0f}, {e->tokenizer().token_to_id("<|im_end|>")});
  for (bool with_system : {true, false}) {
    json m = json::array();
    if (with_system) m.push_back({{"role", "system"}, {"content", sys}});
    m.push_back({{"role", "user"}, {"content", "Name a color."}});
    const json j = r.post("/v1/chat/completions", {{"messages", m}, {"max_tokens", 16}, {"temperature", 0}});
    EXPECT_EQ(j["usage"]["prompt_tokens"], body.size());
    EXPECT_EQ(j["choices"][0]["message"]["content"], continuation(*e, all, want));
  }
  const json err = r.post("/v1/chat/completions", {{"messages", {{{"role", "system"}, {"content", "Be verbose."}},
                                                                 {{"role", "user"}, {"content", "hi"}}}}}, 400);
  EXPECT_THAT(err["error"]["message"].get<std::string>(), HasSubstr("system prompt it was quantized with"));
}

TEST(Server, ErrorsAreOpenAIErrorObjects) {
  const auto& e = stories_engine();
  ServerOptions o;
  o.ctx = 64;
  o.max_body_bytes = 4096;
  Running r(e, o);
  auto msg = [](const json& j) { return j["error"]["message"].get<std::string>(); };
  EXPECT_THAT(msg(r.post("/v1/completions", {{"prompt", "x"}, {"max_tokens", 100}}, 400)),
              HasSubstr("exceeds the context of 64 tokens"));
  EXPECT_THAT(msg(r.post("/v1/completions", {{"prompt", {1, 100000}}}, 400)), HasSubstr("outside the vocabulary"));
  EXPECT_THAT(msg(r.post("/v1/completions", {{"prompt", "x"}, {"model", "gpt-4"}}, 404)), HasSubstr("not served here"));
  EXPECT_EQ(r.post("/v1/completions", {{"prompt", "x"}, {"model", r.srv->alias()}, {"max_tokens", 1}})["model"], r.srv->alias());
  auto res = r.client().Post("/v1/completions", "{\"prompt\": ", "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 400);
  EXPECT_THAT(res->body, HasSubstr("not valid JSON"));
  res = r.client().Post("/v1/completions", std::string(5000, ' '), "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 413);
  // A chunked body is held to the same cap (httplib 0.11 checks only Content-Length and read a
  // chunked one whole): within it, read whole; over it, 413; far over it (past the 8× drain), the
  // read stops — 413 or a closed connection — and the server goes on serving.
  auto chunked = [&](const std::string& body) {
    return r.client().Post(
        "/tokenize",
        [body](size_t offset, httplib::DataSink& sink) {
          if (offset < body.size())
            sink.write(body.data() + offset, std::min<size_t>(4096, body.size() - offset));
          else
            sink.done();
          return true;
        },
        "application/json");
  };
  res = chunked(json({{"prompt", "Hello world"}}).dump());
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(json::parse(res->body)["tokens"], e->tokenizer().encode("Hello world", {}));
  res = chunked(json({{"prompt", std::string(5000, 'a')}}).dump());
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 413);
  EXPECT_THAT(res->body, HasSubstr("exceeds 4096 bytes"));
  res = r.client().Post("/tokenize", httplib::MultipartFormDataItems{{"prompt", "Hello", "", ""}});
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 415);
  EXPECT_THAT(res->body, HasSubstr("must be JSON"));
  res = chunked(json({{"prompt", std::string(100000, 'a')}}).dump());
  if (res) {
    EXPECT_EQ(res->status, 413);
  }
  EXPECT_EQ(r.get("/health")["status"], "ok");
  res = r.client().Get("/v2/nothing");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 404);
  EXPECT_THAT(res->body, HasSubstr("no endpoint GET /v2/nothing"));
  // Tokenizer endpoints (lm-eval's remote tokenizer): the tokenizer's own ids and text.
  const std::vector<int32_t> ids = e->tokenizer().encode("Hello world", {.add_special = false});
  EXPECT_EQ(r.post("/tokenize", {{"prompt", "Hello world"}, {"add_special_tokens", false}})["tokens"], ids);
  EXPECT_EQ(r.post("/detokenize", {{"tokens", ids}})["prompt"], e->tokenizer().decode(ids, false));
  EXPECT_TRUE(r.get("/tokenizer_info").contains("eos_token"));
  EXPECT_EQ(r.get("/v1/models")["data"][0]["id"], r.srv->alias());
  const std::string metrics = r.get("/metrics");
  EXPECT_THAT(metrics, HasSubstr("sinkq_requests_total{endpoint=\"/v1/completions\",status=\"400\"} 3"));
  EXPECT_THAT(metrics, HasSubstr("sinkq_kv_bytes_allocated "));
  EXPECT_THAT(metrics, HasSubstr("sinkq_queue_depth 0"));
}

TEST(Server, ApiKey) {
  ServerOptions o;
  o.ctx = 64;
  o.api_key = "s3cret";
  Running r(stories_engine(), o);
  const std::string body = json{{"prompt", "x"}, {"max_tokens", 1}}.dump();
  auto c = r.client();
  auto res = c.Post("/v1/completions", body, "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 401);
  res = c.Post("/v1/completions", {{"Authorization", "Bearer wrong"}}, body, "application/json");
  EXPECT_EQ(res->status, 401);
  res = c.Post("/v1/completions", {{"Authorization", "Bearer s3cret"}}, body, "application/json");
  EXPECT_EQ(res->status, 200);
  res = c.Get("/health");  // open: load balancers probe it
  EXPECT_EQ(res->status, 200);
}

// One session, no queue: while a stream holds the session, another request is answered 503 with
// Retry-After; a client that goes away mid-stream frees the session (the generation is cancelled
// at its next token) and the next request is served.
TEST(Server, BusyAndDisconnect) {
  ServerOptions o;
  o.ctx = 256;
  o.parallel = 1;
  o.queue = 0;
  Running r(smol_engine(), o);
  const std::string body =
      json{{"prompt", "Write a long story about a dragon."}, {"max_tokens", 200}, {"temperature", 0}, {"stream", true},
           {"ignore_eos", true}}.dump();
  int busy_status = 0;
  std::string retry_after;
  auto c = r.client();
  int chunks = 0;
  post_streaming(c, "/v1/completions", body, [&](const char*, size_t) {
    if (++chunks == 1) {  // the session is generating now: 199 tokens, seconds, to go
      auto b = r.client().Post("/v1/completions", json{{"prompt", "x"}, {"max_tokens", 1}}.dump(), "application/json");
      if (b) {
        busy_status = b->status;
        retry_after = b->get_header_value("Retry-After");
      }
    }
    return chunks < 3;  // then hang up
  });
  EXPECT_EQ(busy_status, 503);
  EXPECT_EQ(retry_after, "1");
  // The session comes back (the generation ends at its next write), well before 200 tokens.
  bool freed = false;
  for (int i = 0; i < 600 && !freed; ++i) {
    freed = r.get("/health")["sessions_free"] == 1;
    if (!freed) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_TRUE(freed);
  EXPECT_THAT(r.get("/metrics").get<std::string>(), HasSubstr("sinkq_cancelled_total 1"));
  EXPECT_EQ(r.get("/metrics").get<std::string>().find("sinkq_generated_tokens_total 200"), std::string::npos)
      << "a cancelled generation does not run to max_tokens";
  EXPECT_EQ(r.post("/v1/completions", {{"prompt", "x"}, {"max_tokens", 1}})["choices"].size(), 1u);
}

// One session and a queue of two: the requests beyond the first wait for the session and are
// answered, not refused.
TEST(Server, QueuedRequestsWait) {
  ServerOptions o;
  o.ctx = 128;
  o.parallel = 1;
  o.queue = 2;
  Running r(stories_engine(), o);
  std::vector<std::future<int>> f;
  for (int i = 0; i < 3; ++i)
    f.push_back(std::async(std::launch::async, [&] {
      auto res = r.client().Post("/v1/completions", json{{"prompt", "Once"}, {"max_tokens", 100}, {"temperature", 0}}.dump(),
                                 "application/json");
      return res ? res->status : -1;
    }));
  for (auto& x : f) EXPECT_EQ(x.get(), 200);
}

// stop() during a stream: the stream ends at its next token, run() returns.
TEST(Server, StopEndsInFlightStreams) {
  ServerOptions o;
  o.ctx = 256;
  o.port = 0;
  o.log_requests = false;
  auto srv = std::make_unique<Server>(smol_engine(), o);
  const int port = srv->bind();
  auto done = std::async(std::launch::async, [&] { srv->run(); });
  httplib::Client c("127.0.0.1", port);
  const std::string body =
      json{{"prompt", "Once upon a time"}, {"max_tokens", 200}, {"stream", true}, {"ignore_eos", true}}.dump();
  int chunks = 0;
  std::thread stopper;
  post_streaming(c, "/v1/completions", body, [&](const char*, size_t) {
    if (++chunks == 1) stopper = std::thread([&] { srv->stop(); });
    return true;
  });
  EXPECT_EQ(done.wait_for(std::chrono::seconds(60)), std::future_status::ready);
  if (stopper.joinable()) stopper.join();
  EXPECT_LT(chunks, 150) << "the stream should end soon after stop(), not run to max_tokens";
}

// The CLI: `sinkq serve --port 0 --json` prints where it listens, serves, and exits 0 on SIGTERM.
TEST(Server, CliServesAndExitsOnSigterm) {
  int out[2];
  ASSERT_EQ(pipe(out), 0);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    dup2(out[1], 1);
    close(out[0]);
    execl(SINKQ_BINARY, SINKQ_BINARY, "serve", "-m", stories().c_str(), "--port", "0", "--ctx", "64", "--json", nullptr);
    _exit(127);
  }
  close(out[1]);
  struct Reaper {  // a failed assertion must not leave the server running
    pid_t pid;
    ~Reaper() {
      if (pid > 0) {
        kill(pid, SIGKILL);
        waitpid(pid, nullptr, 0);
      }
    }
  } reaper{pid};
  std::string line;
  char ch;
  while (read(out[0], &ch, 1) == 1 && ch != '\n') line += ch;
  close(out[0]);
  const json j = json::parse(line);
  httplib::Client c("127.0.0.1", j["port"].get<int>());
  auto res = c.Post("/v1/completions", json{{"prompt", "Once"}, {"max_tokens", 4}}.dump(), "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  kill(pid, SIGTERM);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  reaper.pid = 0;
  EXPECT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

TEST(Server, BadOptionsNameTheFlag) {
  ServerOptions o;
  o.ctx = 100000;
  EXPECT_THAT(testing::error_of([&] { Server s(stories_engine(), o); }), HasSubstr("--ctx 100000 does not fit"));
  o.ctx = 0;
  o.parallel = 0;
  EXPECT_THAT(testing::error_of([&] { Server s(stories_engine(), o); }), HasSubstr("--parallel"));
  // A port already in use.
  ServerOptions a;
  a.ctx = 16;
  Running r(stories_engine(), a);
  a.port = r.port;
  Server b(stories_engine(), a);
  EXPECT_THAT(testing::error_of([&] { b.bind(); }), HasSubstr(fmt::format("--port {}", r.port)));
}

}  // namespace
}  // namespace sinkq::server
