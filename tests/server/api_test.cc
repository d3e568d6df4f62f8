// The request parsers of sinkq serve (server/api.h): every field's type and range checked with
// its name in the message; options sinkq does not implement refused, not ignored; stop strings
// over streamed pieces; the constant-time key compare.
#include "server/api.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace sinkq::server {
namespace {

using ::testing::HasSubstr;

// The message and parameter of the ApiError `f` throws (status must be 400).
std::pair<std::string, std::string> api_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status, 400) << e.what();
    return {e.what(), e.param};
  }
  ADD_FAILURE() << "no ApiError";
  return {};
}

TEST(ServerApi, CompletionPromptShapes) {
  const int64_t V = 100;
  auto c = parse_completion(R"({"prompt": "hi"})", V);
  ASSERT_EQ(c.prompts.size(), 1u);
  EXPECT_EQ(*c.prompts[0].text, "hi");
  EXPECT_EQ(c.s.max_tokens, 16);  // OpenAI's default
  EXPECT_EQ(c.s.sampler.temperature, 1.0f);
  EXPECT_FALSE(c.s.seeded);
  c = parse_completion(R"({"prompt": [1, 2, 99]})", V);
  ASSERT_EQ(c.prompts.size(), 1u);
  EXPECT_EQ(c.prompts[0].ids, (std::vector<int32_t>{1, 2, 99}));
  c = parse_completion(R"({"prompt": [[1], [2, 3]], "echo": true, "logprobs": 1, "max_tokens": 0, "seed": 5})", V);
  ASSERT_EQ(c.prompts.size(), 2u);
  EXPECT_EQ(c.prompts[1].ids, (std::vector<int32_t>{2, 3}));
  EXPECT_TRUE(c.echo);
  EXPECT_EQ(c.s.logprobs, 1);
  EXPECT_EQ(c.s.max_tokens, 0);
  EXPECT_TRUE(c.s.seeded);
  EXPECT_EQ(c.s.sampler.seed, 5u);
  c = parse_completion(R"({"prompt": ["a", "b"], "stop": "\n", "top_k": 3, "top_p": 0.5, "temperature": 0})", V);
  EXPECT_EQ(c.prompts.size(), 2u);
  EXPECT_EQ(c.s.stop, std::vector<std::string>{"\n"});
  EXPECT_EQ(c.s.sampler.top_k, 3);
  EXPECT_FALSE(c.s.ignore_eos);
  EXPECT_TRUE(parse_completion(R"({"prompt": "x", "ignore_eos": true})", V).s.ignore_eos);
  // null means "not given" (OpenAI's clients send it).
  c = parse_completion(R"({"prompt": "x", "max_tokens": null, "logprobs": null, "stop": null})", V);
  EXPECT_EQ(c.s.max_tokens, 16);
  EXPECT_EQ(c.s.logprobs, -1);
}

TEST(ServerApi, CompletionErrorsNameTheField) {
  const int64_t V = 100;
  struct Case {
    const char* body;
    const char* param;
    const char* says;
  };
  const Case cases[] = {
      {R"({"prompt": "x",)", "", "not valid JSON"},
      {R"([1, 2])", "", "must be a JSON object"},
      {R"({"prompt": "x", "max_tokens": 1e999})", "", "not valid JSON"},  // out_of_range, not parse_error (fuzzer)
      {R"({})", "prompt", "'prompt' is required"},
      {R"({"prompt": 5})", "prompt", "must be a string"},
      {R"({"prompt": []})", "prompt", "empty array"},
      {R"({"prompt": [1, "a"]})", "prompt", "'prompt[1]' must be a token id"},
      {R"({"prompt": [1, 100]})", "prompt", "token id 100 is outside the vocabulary (0..99)"},
      {R"({"prompt": [1, -1]})", "prompt", "token id -1"},
      {R"({"prompt": [[1], "a"]})", "prompt", "'prompt[1]' is string"},
      {R"({"prompt": [[1], [2, 300]]})", "prompt", "'prompt[1][1]'"},
      {R"({"prompt": [1, 18446744073709551615]})", "prompt", "outside the vocabulary"},
      {R"({"prompt": "x", "max_tokens": "5"})", "max_tokens", "'max_tokens' must be an integer"},
      {R"({"prompt": "x", "max_tokens": -1})", "max_tokens", "out of range"},
      {R"({"prompt": "x", "max_tokens": 1.5})", "max_tokens", "must be an integer"},
      {R"({"prompt": "x", "temperature": -0.5})", "temperature", ">= 0"},
      {R"({"prompt": "x", "temperature": "hot"})", "temperature", "must be a number"},
      // Finite as a double, not as the sampler's float: was a 500 naming the CLI's --temp.
      {R"({"prompt": "x", "temperature": 1e308})", "temperature", "out of range (a 32-bit float)"},
      {R"({"prompt": "x", "top_p": 1e-300})", "top_p", "(0, 1]"},
      {R"({"prompt": "x", "min_p": 0.1})", "min_p", "not supported"},
      {R"({"prompt": "x", "repetition_penalty": 1.2})", "repetition_penalty", "not supported"},
      {R"({"prompt": "x", "top_p": 0})", "top_p", "(0, 1]"},
      {R"({"prompt": "x", "top_p": 1.5})", "top_p", "(0, 1]"},
      {R"({"prompt": "x", "top_k": -2})", "top_k", "out of range"},
      {R"({"prompt": "x", "seed": "s"})", "seed", "must be an integer"},
      {R"({"prompt": "x", "stop": 3})", "stop", "string or an array"},
      {R"({"prompt": "x", "stop": [""]})", "stop", "'stop[0]' is empty"},
      {R"({"prompt": "x", "stop": ["a", 1]})", "stop", "'stop[1]' must be a string"},
      {R"({"prompt": "x", "echo": "yes"})", "echo", "true or false"},
      {R"({"prompt": "x", "logprobs": true})", "logprobs", "not a boolean"},
      {R"({"prompt": "x", "logprobs": 21})", "logprobs", "out of range 0..20"},
      {R"({"prompt": "x", "stream": 1})", "stream", "true or false"},
      {R"({"prompt": "x", "n": 2})", "n", "'n' > 1 is not supported"},
      {R"({"prompt": "x", "best_of": 3})", "best_of", "not supported"},
      {R"({"prompt": "x", "presence_penalty": 0.5})", "presence_penalty", "not supported"},
      {R"({"prompt": "x", "frequency_penalty": 1})", "frequency_penalty", "not supported"},
      {R"({"prompt": "x", "logit_bias": {"1": 5}})", "logit_bias", "not supported"},
      {R"({"prompt": "x", "suffix": "end"})", "suffix", "not supported"},
      {R"({"prompt": "x", "stream_options": 1})", "stream_options", "must be an object"},
  };
  for (const Case& c : cases) {
    const auto [msg, param] = api_error([&] { parse_completion(c.body, V); });
    EXPECT_THAT(msg, HasSubstr(c.says)) << c.body;
    EXPECT_EQ(param, c.param) << c.body;
  }
  // Off values of the unsupported options are accepted (clients send them).
  EXPECT_NO_THROW(parse_completion(R"({"prompt": "x", "n": 1, "best_of": 1, "presence_penalty": 0, "logit_bias": {}, "suffix": ""})", V));
}

TEST(ServerApi, ChatMessages) {
  auto c = parse_chat(R"({"messages": [{"role": "developer", "content": "S"},
                                        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}],
                          "logprobs": true, "top_logprobs": 2, "max_completion_tokens": 7, "stream": true,
                          "stream_options": {"include_usage": true}})");
  ASSERT_EQ(c.messages.size(), 2u);
  EXPECT_EQ(c.messages[0].role, "system");
  EXPECT_EQ(c.messages[1].content, "ab");
  EXPECT_EQ(c.s.logprobs, 2);
  EXPECT_EQ(c.s.max_tokens, 7);
  EXPECT_TRUE(c.s.stream);
  EXPECT_TRUE(c.s.include_usage);
  EXPECT_EQ(parse_chat(R"({"messages": [{"role": "user", "content": "x"}]})").s.max_tokens, -1);  // until the context ends
  struct Case {
    const char* body;
    const char* says;
  };
  const Case cases[] = {
      {R"({})", "'messages' is required"},
      {R"({"messages": []})", "non-empty array"},
      {R"({"messages": ["hi"]})", "'messages[0]' must be an object"},
      {R"({"messages": [{"content": "x"}]})", "'messages[0].role' must be a string"},
      {R"({"messages": [{"role": "tool", "content": "x"}]})", "'messages[0].role' is 'tool'"},
      {R"({"messages": [{"role": "user"}]})", "'messages[0].content' is required"},
      {R"({"messages": [{"role": "user", "content": 3}]})", "must be a string or an array of text parts"},
      {R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})", "only text is supported"},
      {R"({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2})", "needs 'logprobs': true"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tools": [{}]})", "'tools' is not supported"},
  };
  for (const Case& c : cases) EXPECT_THAT(api_error([&] { parse_chat(c.body); }).first, HasSubstr(c.says)) << c.body;
}

TEST(ServerApi, TokenizeBodies) {
  EXPECT_EQ(parse_tokenize(R"({"prompt": "a b", "add_special_tokens": false})").text, "a b");
  EXPECT_FALSE(parse_tokenize(R"({"prompt": "a", "add_special_tokens": false})").add_special);
  EXPECT_EQ(parse_tokenize(R"({"content": "c"})").text, "c");  // llama.cpp's field name
  EXPECT_THAT(api_error([] { parse_tokenize(R"({"prompt": 1})"); }).first, HasSubstr("'prompt' must be a string"));
  EXPECT_EQ(parse_detokenize(R"({"tokens": [1, 2]})", 10), (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(api_error([] { parse_detokenize(R"({"tokens": [10]})", 10); }).second, "tokens");
}

// Text before a stop string goes out; the stop string and everything after it never do; a piece
// that may begin a stop string waits until it is known not to.
TEST(ServerApi, StopStringsOverPieces) {
  StopMatcher m({"\n\n", "END"});
  EXPECT_EQ(m.push("Hello"), "Hello");
  EXPECT_EQ(m.push(" E"), " ");  // "E" may begin "END"
  EXPECT_EQ(m.push("N"), "");    // "EN" too
  EXPECT_EQ(m.push("x"), "ENx");  // not "END": released
  EXPECT_EQ(m.push("\n"), "");
  EXPECT_EQ(m.push("\nmore"), "");  // "\n\n" completed across pieces
  EXPECT_TRUE(m.matched());
  EXPECT_EQ(m.push("after"), "");
  EXPECT_EQ(m.flush(), "");
  EXPECT_EQ(m.text(), "Hello ENx");

  StopMatcher e({"stop"});  // the earliest match wins; text in the same piece before it goes out
  EXPECT_EQ(e.push("ab stop cd stop"), "ab ");
  EXPECT_TRUE(e.matched());

  StopMatcher f({"xyz"});  // generation ends while a prefix is held: it is released by flush()
  EXPECT_EQ(f.push("axy"), "a");
  EXPECT_EQ(f.flush(), "xy");
  EXPECT_FALSE(f.matched());
  EXPECT_EQ(f.text(), "axy");

  StopMatcher none({});
  EXPECT_EQ(none.push("anything"), "anything");
}

TEST(ServerApi, ConstantTimeEqual) {
  EXPECT_TRUE(constant_time_equal("Bearer k1", "Bearer k1"));
  EXPECT_FALSE(constant_time_equal("Bearer k1", "Bearer k2"));
  EXPECT_FALSE(constant_time_equal("Bearer k", "Bearer k1"));  // a prefix is not the key
  EXPECT_FALSE(constant_time_equal("", "Bearer k1"));
  EXPECT_TRUE(constant_time_equal("", ""));
}

TEST(ServerApi, ErrorBodyIsOpenAIs) {
  const nlohmann::json j = error_body(ApiError(400, "bad thing", "prompt"));
  EXPECT_EQ(j["error"]["message"], "bad thing");
  EXPECT_EQ(j["error"]["param"], "prompt");
  EXPECT_EQ(j["error"]["type"], "invalid_request_error");
  EXPECT_TRUE(error_body(ApiError(500, "x", "", "server_error"))["error"]["param"].is_null());
}

}  // namespace
}  // namespace sinkq::server
