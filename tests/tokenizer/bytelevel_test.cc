// Byte-level BPE (GPT-2 tokenizer.json, Llama-3 / Qwen2 converted from tiktoken): whole-file
// encoding against the python reference, special tokens, added-token flags.
#include <gtest/gtest.h>

#include <cstdio>

#include "tok_test_util.h"

namespace sinkq::testing {
namespace {

uint64_t fnv1a(const std::vector<int32_t>& ids) {
  uint64_t h = 14695981039346656037ull;
  for (int32_t id : ids) {
    h ^= uint64_t(id);
    h *= 1099511628211ull;
  }
  return h;
}

struct WholeFileParam {
  const char* tokenizer;
  size_t count;   // tokens of the whole WikiText-2 test file
  uint64_t hash;  // fnv1a of the ids (h ^= id; h *= prime)
};

class WholeFile : public ::testing::TestWithParam<WholeFileParam> {};

// Reference numbers from /work/shared/tokenizers/_verify/reftok.py (ByteLevelBPE on
// gpt2-hf/tokenizer.json; TiktokenBPE on the rank files with the same regexes, ignore_merges for
// Llama-3, NFC for Qwen2) over the whole file. GPT-2's count, 287,644, is also the well-known
// size of WikiText-2 raw test in GPT-2 tokens.
TEST_P(WholeFile, MatchesReferenceAndRoundTrips) {
  const WholeFileParam& p = GetParam();
  const Tokenizer& tok = shared_tokenizer(p.tokenizer);
  const std::string text = read_text_file(shared_dir() + "/data/wikitext-2/wikitext2_test_joined.txt");
  const auto t0 = std::chrono::steady_clock::now();
  const auto ids = tok.encode(text, {.add_special = false});
  const double secs = seconds_since(t0);
  std::printf("[ timing ] %s: encode %zu bytes -> %zu tokens in %.3f s (first call, cold word cache)\n",
              p.tokenizer, text.size(), ids.size(), secs);
  EXPECT_EQ(ids.size(), p.count);
  EXPECT_EQ(fnv1a(ids), p.hash);
  EXPECT_TRUE(tok.decode(ids) == text) << "whole-file decode differs";
}

INSTANTIATE_TEST_SUITE_P(Tok, WholeFile,
                         ::testing::Values(WholeFileParam{"gpt2-hf", 287644, 0x9185de6c49973ab6ull},
                                           WholeFileParam{"llama3-tiktoken", 289076, 0x2144efcb4c3fb2a4ull},
                                           WholeFileParam{"qwen2-tiktoken", 299078, 0x30b28d939dab8e4dull}),
                         [](const auto& info) {
                           std::string s = info.param.tokenizer;
                           for (char& c : s) {
                             if (c == '-') c = '_';
                           }
                           return s;
                         });

TEST(ByteLevel, Gpt2Basics) {
  const Tokenizer& t = shared_tokenizer("gpt2-hf");
  EXPECT_EQ(t.kind(), "bpe-bytelevel");
  EXPECT_EQ(t.vocab_size(), 50257);
  EXPECT_FALSE(t.add_bos());  // ByteLevel post-processor, no tokenizer_config.json
  EXPECT_EQ(t.encode("Hello world"), (std::vector<int32_t>{15496, 995}));
  EXPECT_EQ(t.token_text(18435), " Hello");
  EXPECT_EQ(t.token_text(198), "\n");
  EXPECT_EQ(t.encode("a<|endoftext|>b"), (std::vector<int32_t>{64, 50256, 65}));
  EXPECT_TRUE(t.is_special(50256));
  EXPECT_EQ(t.decode({64, 50256, 65}), "ab");
  EXPECT_EQ(t.decode({64, 50256, 65}, /*skip_special=*/false), "a<|endoftext|>b");
  // parse_special=false: the marker is ordinary text.
  EXPECT_EQ(t.decode(t.encode("a<|endoftext|>b", {.parse_special = false})), "a<|endoftext|>b");
  EXPECT_NE(t.encode("a<|endoftext|>b", {.parse_special = false}).size(), 3u);
}

TEST(ByteLevel, Llama3Specials) {
  const Tokenizer& t = shared_tokenizer("llama3-tiktoken");
  EXPECT_EQ(t.vocab_size(), 128256);
  EXPECT_EQ(t.bos_id(), 128000);  // from the TemplateProcessing post-processor
  EXPECT_TRUE(t.add_bos());
  const auto hi = t.encode("hi", {.add_special = false});
  ASSERT_EQ(hi.size(), 1u);
  std::vector<int32_t> expect{128000, 128006};
  const auto user = t.encode("user", {.add_special = false});
  expect.insert(expect.end(), user.begin(), user.end());
  expect.push_back(128007);
  expect.insert(expect.end(), hi.begin(), hi.end());
  expect.push_back(128009);
  EXPECT_EQ(t.encode("<|start_header_id|>user<|end_header_id|>hi<|eot_id|>"), expect);
  EXPECT_EQ(t.token_to_id("<|eot_id|>"), 128009);
  EXPECT_EQ(t.token_to_id("<|reserved_special_token_250|>"), 128255);
}

TEST(ByteLevel, Qwen2SpecialsAndNfc) {
  const Tokenizer& t = shared_tokenizer("qwen2-tiktoken");
  EXPECT_FALSE(t.add_bos());
  EXPECT_EQ(t.bos_id(), -1);
  EXPECT_EQ(t.eos_id(), 151645);  // "<|im_end|>" from tokenizer_config.json
  const auto ids = t.encode("<|im_start|>user\nhi<|im_end|>");
  ASSERT_GE(ids.size(), 3u);
  EXPECT_EQ(ids.front(), 151644);
  EXPECT_EQ(ids.back(), 151645);
  EXPECT_EQ(t.decode(ids), "user\nhi");
  // NFC: a decomposed "é" encodes like the composed one.
  EXPECT_EQ(t.encode("caf\u0065\u0301"), t.encode("caf\u00e9"));
}

// Phi-3: "<|assistant|>" has rstrip (eats the spaces after it); "</s>" is a non-special added
// token, so it is matched even with parse_special=false.
TEST(AddedTokenFlags, Phi3) {
  const Tokenizer& t = shared_tokenizer("phi3-hf");
  EXPECT_FALSE(t.add_bos());  // tokenizer_config.json add_bos_token=false
  std::vector<int32_t> expect{32001};
  const auto hi = t.encode("Hi", {.add_special = false});
  expect.insert(expect.end(), hi.begin(), hi.end());
  EXPECT_EQ(t.encode("<|assistant|>   Hi", {.add_special = false}), expect);
  const auto plain = t.encode("x</s>", {.add_special = false, .parse_special = false});
  EXPECT_EQ(plain.back(), 2);
}

// Phi-2: 38 added non-special tokens made of runs of spaces (31 down to ...), matched before the
// byte-level pre-tokenizer.
TEST(AddedTokenFlags, Phi2WhitespaceTokens) {
  const Tokenizer& t = shared_tokenizer("phi2-hf");
  EXPECT_EQ(t.vocab_size(), 50295);
  const auto ids = t.encode(std::string(31, ' ') + "x", {.add_special = false, .parse_special = false});
  EXPECT_EQ(ids, (std::vector<int32_t>{50257, 87}));
  EXPECT_EQ(t.decode(ids), std::string(31, ' ') + "x");
}

}  // namespace
}  // namespace sinkq::testing

namespace sinkq::testing {
namespace {

// Long runs without a pre-token boundary: one huge BPE piece (heap merge) and `\s+(?!\S)` over a
// long run of spaces (PCRE2 JIT stack). Must stay lossless and fast.
TEST(ByteLevel, LongRuns) {
  for (const char* name : {"gpt2-hf", "llama3-tiktoken", "stories-hf"}) {
    const Tokenizer& t = shared_tokenizer(name);
    for (const std::string& s : {std::string(200000, ' ') + "x", std::string(200000, 'a'),
                                 std::string(100000, '7'), std::string(50000, '\n') + " \t end"}) {
      const auto t0 = std::chrono::steady_clock::now();
      const auto ids = t.encode(s, {.add_special = false});
      EXPECT_LT(seconds_since(t0), 5.0) << name;
      EXPECT_TRUE(t.decode(ids) == s) << name << " " << s.size();
    }
  }
}

}  // namespace
}  // namespace sinkq::testing
