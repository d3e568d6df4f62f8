// tests/tokenizer/tok_test_util.h — tokenizers shared by the tokenizer tests (each is loaded once
// per test binary: the files are 2–10 MB of JSON) and readers for the golden files.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/mmap.h"
#include "tiktoken_convert.h"
#include "tokenizer/tokenizer.h"
#include "util/testutil.h"

namespace sinkq::testing {

inline std::string tok_dir() { return shared_dir() + "/tokenizers"; }

// Converted tiktoken tokenizers live in one temp dir for the whole test binary.
inline const TempDir& converted_dir() {
  static TempDir dir;
  return dir;
}

inline std::unique_ptr<Tokenizer> make_named_tokenizer(const std::string& name) {
  const std::string t = tok_dir();
  if (name == "stories-hf") return Tokenizer::load(shared_dir() + "/models/stories260K");
  if (name == "stories-sp") return Tokenizer::from_sentencepiece(shared_dir() + "/models/stories260K/tokenizer.model");
  if (name == "llama2-hf") return Tokenizer::load(t + "/llama2-hf");
  if (name == "llama2-spm") return Tokenizer::from_sentencepiece(t + "/llama2-spm/tokenizer.model");
  if (name == "phi3-hf") return Tokenizer::load(t + "/phi3-mini-hf");
  if (name == "gpt2-hf") return Tokenizer::load(t + "/gpt2-hf");
  if (name == "phi2-hf") return Tokenizer::load(t + "/phi2-hf");
  if (name == "mistral-v3-sp") {
    return Tokenizer::from_sentencepiece(t + "/mistral-v0.3-spm/mistral_instruct_tokenizer_240323.model.v3");
  }
  if (name == "llama3-tiktoken") {
    TiktokenSpec spec;
    spec.rank_file = t + "/llama3-bpe/tokenizer.model";
    spec.pattern = kLlama3Pattern;
    spec.ignore_merges = true;  // as Llama-3's tokenizer.json
    spec.specials = llama3_specials();
    spec.bos = "<|begin_of_text|>";
    const std::string dir = converted_dir().file("llama3");
    std::filesystem::create_directories(dir);
    write_tiktoken_tokenizer_json(spec, dir + "/tokenizer.json");
    return Tokenizer::load(dir);
  }
  if (name == "qwen2-tiktoken") {
    TiktokenSpec spec;
    spec.rank_file = t + "/qwen-bpe/qwen.tiktoken";
    spec.pattern = kQwen2Pattern;
    spec.nfc = true;  // as Qwen2's tokenizer.json
    // Specials are not in the rank file: take them from the real Qwen2.5 tokenizer_config.json.
    const auto cfg = nlohmann::json::parse(read_file(t + "/qwen-bpe/qwen2.5/tokenizer_config.json"));
    for (const auto& [id, v] : cfg["added_tokens_decoder"].items()) {
      spec.specials.emplace_back(v["content"].get<std::string>(), std::stoi(id));
    }
    const std::string dir = converted_dir().file("qwen2");
    std::filesystem::create_directories(dir);
    write_tiktoken_tokenizer_json(spec, dir + "/tokenizer.json");
    write_file_atomic(dir + "/tokenizer_config.json",
                      R"({"add_bos_token": false, "bos_token": null, "eos_token": "<|im_end|>"})");
    return Tokenizer::load(dir);
  }
  fail("unknown test tokenizer '{}'", name);
}

// Loaded on first use, kept for the rest of the test binary.
inline const Tokenizer& shared_tokenizer(const std::string& name) {
  static std::mutex mu;
  static std::map<std::string, std::unique_ptr<Tokenizer>> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto& slot = cache[name];
  if (!slot) slot = make_named_tokenizer(name);
  return *slot;
}

// llama.cpp's tests/test-tokenizer-0 format: .inp = strings separated by
// "\n__ggml_vocab_test__\n" (the file ends with one), .out = one line of ids per string.
struct VocabCase {
  std::string text;
  std::vector<int32_t> ids;
};
inline std::vector<VocabCase> read_llamacpp_cases(const std::string& vocab) {
  const std::string prefix = tok_dir() + "/llamacpp-ggml-vocab/ggml-vocab-" + vocab + ".gguf";
  const std::string inp = read_file(prefix + ".inp"), out = read_file(prefix + ".out");
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<VocabCase> cases;
  for (size_t pos = 0; pos < inp.size();) {
    size_t next = inp.find(sep, pos);
    if (next == std::string::npos) next = inp.size();
    cases.push_back({inp.substr(pos, next - pos), {}});
    pos = next == inp.size() ? next : next + sep.size();
  }
  size_t line_start = 0;
  for (VocabCase& c : cases) {
    size_t eol = out.find('\n', line_start);
    if (eol == std::string::npos) eol = out.size();
    std::string line = out.substr(line_start, eol - line_start);
    line_start = eol + 1;
    size_t p = 0;
    while (p < line.size()) {
      size_t q = line.find(' ', p);
      if (q == std::string::npos) q = line.size();
      if (q > p) c.ids.push_back(std::stoi(line.substr(p, q - p)));
      p = q + 1;
    }
  }
  return cases;
}

inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Printable form of a string for failure messages.
inline std::string escaped(const std::string& s) {
  return nlohmann::json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace sinkq::testing
