// sinkq/server/api.h — the OpenAI-style request bodies of `sinkq serve`, parsed and validated into
// plain structs, and the pieces of the responses that do not need the HTTP library (stop strings,
// logprobs objects, the constant-time key compare). Every malformed field is an ApiError naming it
// (HTTP 400 with OpenAI's error object), never a silent default.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "calib/prefix.h"
#include "eval/generate.h"

namespace sinkq::server {

// An error answered to the client: status (400, 401, 404, 413, 503, 500), message, the offending
// parameter ("" when none) and OpenAI's error type.
struct ApiError : std::runtime_error {
  int status;
  std::string param, type;
  ApiError(int status, std::string message, std::string param = "", std::string type = "invalid_request_error")
      : std::runtime_error(std::move(message)), status(status), param(std::move(param)), type(std::move(type)) {}
};
// {"error": {"message", "type", "param", "code"}} as OpenAI sends it.
nlohmann::json error_body(const ApiError& e);

// A prompt as the client sent it: text, or token ids.
struct Prompt {
  std::optional<std::string> text;
  std::vector<int32_t> ids;  // when !text
};

// What /v1/completions and /v1/chat/completions share.
struct Sampling {
  int64_t max_tokens = 16;
  SamplerOptions sampler;  // temperature 1, top_p 1, top_k 0 unless given
  bool seeded = false;     // the client gave a seed (else the server draws one)
  std::vector<std::string> stop;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage: a last chunk with the usage
  bool ignore_eos = false;     // (llama.cpp's extension) generate max_tokens whatever the model says
  int logprobs = -1;       // -1: none; else top-N alternatives per token
};

struct CompletionRequest {
  std::string model;  // "" when absent
  std::vector<Prompt> prompts;  // one choice each
  Sampling s;
  bool echo = false;
};

struct ChatRequest {
  std::string model;
  std::vector<ChatMessage> messages;
  Sampling s;
};

// Parse a request body (the JSON text): ApiError 400 naming the field for malformed JSON, a wrong
// type, a value out of range or an option sinkq does not implement (n > 1, best_of, penalties,
// logit_bias, suffix), which would otherwise be ignored without a word. `vocab` bounds token ids.
CompletionRequest parse_completion(std::string_view body, int64_t vocab);
ChatRequest parse_chat(std::string_view body);
// /tokenize {"prompt" | "content", "add_special_tokens"} and /detokenize {"tokens"}.
struct TokenizeRequest {
  std::string text;
  bool add_special = true;
};
TokenizeRequest parse_tokenize(std::string_view body);
std::vector<int32_t> parse_detokenize(std::string_view body, int64_t vocab);

// StopMatcher (stop strings over streamed text) is tokenizer/tokenizer.h's, shared with the Python module.

// Compares a secret in time that depends on the lengths only, not on where the strings differ.
bool constant_time_equal(std::string_view a, std::string_view b);

}  // namespace sinkq::server
