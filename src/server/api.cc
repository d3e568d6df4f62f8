#include "server/api.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace sinkq::server {

using nlohmann::json;

namespace {

[[noreturn]] void bad(const std::string& param, const std::string& message) { throw ApiError(400, message, param); }

json parse_body(std::string_view body) {
  json j;
  try {
    j = json::parse(body);
  } catch (const json::exception& e) {  // parse_error, and out_of_range for a number past double's range
    bad("", fmt::format("the request body is not valid JSON: {}", e.what()));
  }
  if (!j.is_object()) bad("", fmt::format("the request body must be a JSON object (got {})", j.type_name()));
  return j;
}

// The field, or null when absent or JSON null (OpenAI's clients send null for "not given").
const json* field(const json& j, const char* name) {
  auto it = j.find(name);
  return it == j.end() || it->is_null() ? nullptr : &*it;
}

int64_t get_int(const json& j, const char* name, int64_t lo, int64_t hi, int64_t def) {
  const json* f = field(j, name);
  if (!f) return def;
  if (!f->is_number_integer()) bad(name, fmt::format("'{}' must be an integer (got {})", name, f->type_name()));
  // Unsigned values above INT64_MAX are out of range for every field here.
  if (f->is_number_unsigned() && f->get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max()))
    bad(name, fmt::format("'{}' = {} is out of range {}..{}", name, f->dump(), lo, hi));
  const int64_t v = f->get<int64_t>();
  if (v < lo || v > hi) bad(name, fmt::format("'{}' = {} is out of range {}..{}", name, v, lo, hi));
  return v;
}

double get_number(const json& j, const char* name, double def) {
  const json* f = field(j, name);
  if (!f) return def;
  if (!f->is_number()) bad(name, fmt::format("'{}' must be a number (got {})", name, f->type_name()));
  const double v = f->get<double>();
  if (!std::isfinite(v)) bad(name, fmt::format("'{}' must be finite", name));
  return v;
}

// A number the sampler holds as a float: finite as a float too (1e308 is a double, not a float).
float get_float(const json& j, const char* name, double def) {
  const double v = get_number(j, name, def);
  if (!std::isfinite(float(v))) bad(name, fmt::format("'{}' = {} is out of range (a 32-bit float)", name, v));
  return float(v);
}

bool get_bool(const json& j, const char* name, bool def) {
  const json* f = field(j, name);
  if (!f) return def;
  if (!f->is_boolean()) bad(name, fmt::format("'{}' must be true or false (got {})", name, f->type_name()));
  return f->get<bool>();
}

std::string get_string(const json& j, const char* name) {
  const json* f = field(j, name);
  if (!f) return {};
  if (!f->is_string()) bad(name, fmt::format("'{}' must be a string (got {})", name, f->type_name()));
  return f->get<std::string>();
}

// Options sinkq does not implement: accepted only at their "off" value, else a 400 naming them.
void reject_unsupported(const json& j) {
  if (get_int(j, "n", 1, 1 << 20, 1) != 1) bad("n", "'n' > 1 is not supported: send the request n times");
  if (get_int(j, "best_of", 1, 1 << 20, 1) != 1) bad("best_of", "'best_of' > 1 is not supported");
  for (const char* p : {"presence_penalty", "frequency_penalty"})
    if (get_number(j, p, 0.0) != 0.0) bad(p, fmt::format("'{}' is not supported (only 0)", p));
  // llama.cpp's and vLLM's sampler extensions, accepted at the value that turns them off.
  for (const auto& [p, off] : {std::pair{"min_p", 0.0}, {"typical_p", 1.0}, {"repetition_penalty", 1.0},
                               {"repeat_penalty", 1.0}, {"mirostat", 0.0}, {"tfs_z", 1.0}})
    if (get_number(j, p, off) != off) bad(p, fmt::format("'{}' is not supported (only {})", p, off));
  if (const json* f = field(j, "logit_bias"); f && !(f->is_object() && f->empty()))
    bad("logit_bias", "'logit_bias' is not supported");
  if (const json* f = field(j, "suffix"); f && !(f->is_string() && f->get<std::string>().empty()))
    bad("suffix", "'suffix' (insertion) is not supported");
  if (const json* f = field(j, "tools"); f && !(f->is_array() && f->empty())) bad("tools", "'tools' is not supported");
  if (const json* f = field(j, "response_format"); f && !(f->is_object() && f->value("type", "") == "text"))
    bad("response_format", "'response_format' other than {\"type\": \"text\"} is not supported");
}

Sampling parse_sampling(const json& j, int64_t default_max_tokens, const char* max_tokens_name) {
  Sampling s;
  s.max_tokens = get_int(j, max_tokens_name, 0, int64_t(1) << 31, default_max_tokens);
  s.sampler.temperature = get_float(j, "temperature", 1.0);
  if (s.sampler.temperature < 0) bad("temperature", fmt::format("'temperature' must be >= 0 (got {})", s.sampler.temperature));
  s.sampler.top_p = get_float(j, "top_p", 1.0);
  if (!(s.sampler.top_p > 0 && s.sampler.top_p <= 1))
    bad("top_p", fmt::format("'top_p' must be in (0, 1] (got {})", s.sampler.top_p));
  s.sampler.top_k = int(get_int(j, "top_k", 0, 1 << 30, 0));
  if (field(j, "seed")) {
    s.sampler.seed = uint64_t(get_int(j, "seed", std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max(), 0));
    s.seeded = true;
  }
  if (const json* f = field(j, "stop")) {
    if (f->is_string()) {
      s.stop.push_back(f->get<std::string>());
    } else if (f->is_array()) {
      if (f->size() > 16) bad("stop", fmt::format("'stop' has {} strings (at most 16)", f->size()));
      for (size_t i = 0; i < f->size(); ++i) {
        if (!(*f)[i].is_string()) bad("stop", fmt::format("'stop[{}]' must be a string (got {})", i, (*f)[i].type_name()));
        s.stop.push_back((*f)[i].get<std::string>());
      }
    } else {
      bad("stop", fmt::format("'stop' must be a string or an array of strings (got {})", f->type_name()));
    }
    for (size_t i = 0; i < s.stop.size(); ++i)
      if (s.stop[i].empty()) bad("stop", fmt::format("'stop[{}]' is empty", i));
  }
  s.stream = get_bool(j, "stream", false);
  s.ignore_eos = get_bool(j, "ignore_eos", false);
  if (const json* f = field(j, "stream_options")) {
    if (!f->is_object()) bad("stream_options", "'stream_options' must be an object");
    s.include_usage = get_bool(*f, "include_usage", false);
  }
  reject_unsupported(j);
  return s;
}

std::vector<int32_t> parse_ids(const json& a, const std::string& where, int64_t vocab) {
  std::vector<int32_t> ids;
  ids.reserve(a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    const json& v = a[i];
    if (!v.is_number_integer())
      bad("prompt", fmt::format("'{}[{}]' must be a token id (an integer; got {})", where, i, v.type_name()));
    const int64_t id = v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(vocab) ? vocab : v.get<int64_t>();
    if (id < 0 || id >= vocab)
      bad("prompt", fmt::format("'{}[{}]': token id {} is outside the vocabulary (0..{})", where, i, v.dump(), vocab - 1));
    ids.push_back(int32_t(id));
  }
  return ids;
}

}  // namespace

json error_body(const ApiError& e) {
  return {{"error",
           {{"message", e.what()},
            {"type", e.type},
            {"param", e.param.empty() ? json(nullptr) : json(e.param)},
            {"code", e.status}}}};
}

CompletionRequest parse_completion(std::string_view body, int64_t vocab) {
  const json j = parse_body(body);
  CompletionRequest r;
  r.model = get_string(j, "model");
  const json* p = field(j, "prompt");
  if (!p) bad("prompt", "'prompt' is required");
  constexpr size_t kMaxPrompts = 256;
  const char* shape = "'prompt' must be a string, an array of strings, an array of token ids or an array of arrays of token ids";
  if (p->is_string()) {
    r.prompts.push_back({p->get<std::string>(), {}});
  } else if (p->is_array()) {
    if (p->empty()) bad("prompt", "'prompt' is an empty array");
    const json& first = (*p)[0];
    if (first.is_number()) {
      r.prompts.push_back({std::nullopt, parse_ids(*p, "prompt", vocab)});
    } else {
      if (p->size() > kMaxPrompts) bad("prompt", fmt::format("'prompt' holds {} prompts (at most {} a request)", p->size(), kMaxPrompts));
      for (size_t i = 0; i < p->size(); ++i) {
        const json& e = (*p)[i];
        if (e.is_string() && first.is_string())
          r.prompts.push_back({e.get<std::string>(), {}});
        else if (e.is_array() && first.is_array())
          r.prompts.push_back({std::nullopt, parse_ids(e, fmt::format("prompt[{}]", i), vocab)});
        else
          bad("prompt", fmt::format("{} ('prompt[{}]' is {})", shape, i, e.type_name()));
      }
    }
  } else {
    bad("prompt", fmt::format("{} (got {})", shape, p->type_name()));
  }
  r.s = parse_sampling(j, 16, "max_tokens");
  r.echo = get_bool(j, "echo", false);
  if (const json* f = field(j, "logprobs")) {
    if (f->is_boolean()) bad("logprobs", "'logprobs' of /v1/completions is the number of alternatives (0..20), not a boolean");
    r.s.logprobs = int(get_int(j, "logprobs", 0, 20, 0));
  }
  return r;
}

ChatRequest parse_chat(std::string_view body) {
  const json j = parse_body(body);
  ChatRequest r;
  r.model = get_string(j, "model");
  const json* m = field(j, "messages");
  if (!m) bad("messages", "'messages' is required");
  if (!m->is_array() || m->empty()) bad("messages", "'messages' must be a non-empty array of {role, content}");
  for (size_t i = 0; i < m->size(); ++i) {
    const json& e = (*m)[i];
    const std::string at = fmt::format("messages[{}]", i);
    if (!e.is_object()) bad("messages", fmt::format("'{}' must be an object with role and content", at));
    auto role = e.find("role");
    if (role == e.end() || !role->is_string()) bad("messages", fmt::format("'{}.role' must be a string", at));
    std::string rs = role->get<std::string>();
    if (rs == "developer") rs = "system";  // OpenAI's newer name for the system role
    if (rs != "system" && rs != "user" && rs != "assistant")
      bad("messages", fmt::format("'{}.role' is '{}' (system, developer, user or assistant)", at, rs));
    auto c = e.find("content");
    std::string content;
    if (c == e.end() || c->is_null()) {
      bad("messages", fmt::format("'{}.content' is required", at));
    } else if (c->is_string()) {
      content = c->get<std::string>();
    } else if (c->is_array()) {  // [{"type": "text", "text": ...}, ...]
      for (size_t k = 0; k < c->size(); ++k) {
        const json& part = (*c)[k];
        if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") || !part["text"].is_string())
          bad("messages", fmt::format("'{}.content[{}]' must be {{\"type\": \"text\", \"text\": ...}} (only text is supported)", at, k));
        content += part["text"].get<std::string>();
      }
    } else {
      bad("messages", fmt::format("'{}.content' must be a string or an array of text parts (got {})", at, c->type_name()));
    }
    r.messages.push_back({rs, std::move(content)});
  }
  // max_tokens absent: until the context is full or the model ends its turn (-1, resolved by the server).
  const char* mt = field(j, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
  r.s = parse_sampling(j, -1, mt);
  if (get_bool(j, "logprobs", false)) r.s.logprobs = int(get_int(j, "top_logprobs", 0, 20, 0));
  else if (field(j, "top_logprobs")) bad("top_logprobs", "'top_logprobs' needs 'logprobs': true");
  return r;
}

TokenizeRequest parse_tokenize(std::string_view body) {
  const json j = parse_body(body);
  TokenizeRequest r;
  const char* name = field(j, "prompt") ? "prompt" : "content";  // lm-eval sends prompt, llama.cpp content
  const json* f = field(j, name);
  if (!f) bad("prompt", "'prompt' (the text to tokenize) is required");
  if (!f->is_string()) bad(name, fmt::format("'{}' must be a string (got {})", name, f->type_name()));
  r.text = f->get<std::string>();
  r.add_special = get_bool(j, "add_special_tokens", true);
  return r;
}

std::vector<int32_t> parse_detokenize(std::string_view body, int64_t vocab) {
  const json j = parse_body(body);
  const json* f = field(j, "tokens");
  if (!f || !f->is_array()) bad("tokens", "'tokens' (an array of token ids) is required");
  try {
    return parse_ids(*f, "tokens", vocab);
  } catch (ApiError& e) {
    e.param = "tokens";
    throw;
  }
}

bool constant_time_equal(std::string_view a, std::string_view b) {
  // Every byte of the longer string is visited; the lengths enter the result, not the loop's exit.
  const size_t n = std::max(a.size(), b.size());
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= static_cast<unsigned char>(x ^ y);
  }
  volatile unsigned char sink = diff;  // keep the compiler from ending the loop early on a difference
  return sink == 0;
}

}  // namespace sinkq::server
