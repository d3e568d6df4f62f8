// libFuzzer target: the request bodies of sinkq serve (server/api.h) on arbitrary bytes — every
// body is accepted or refused with an ApiError (400), never a crash; an accepted completion
// respects the documented ranges and what the sampler accepts; the stop-string matcher, fed the same bytes in pieces, releases
// exactly the text before the first stop string.
#include "fuzz_common.h"

#include <cmath>
#include <cstdlib>
#include <string>

#include "server/api.h"

namespace {
constexpr int64_t kVocab = 512;

template <class F>
void only_api_errors(F&& f) {
  try {
    f();
  } catch (const sinkq::server::ApiError& e) {
    if (e.status != 400) std::abort();
  }
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace sinkq::server;
  const std::string body(reinterpret_cast<const char*>(data), size);
  only_api_errors([&] {
    const CompletionRequest r = parse_completion(body, kVocab);
    if (r.prompts.empty() || r.s.max_tokens < 0 || r.s.logprobs < -1 || r.s.logprobs > 20) std::abort();
    // What the sampler itself requires (eval/generate.cc validate: it would be a 500, not a 400).
    const sinkq::SamplerOptions& so = r.s.sampler;
    if (!(std::isfinite(so.temperature) && so.temperature >= 0 && so.top_p > 0 && so.top_p <= 1 && so.top_k >= 0))
      std::abort();
    for (const Prompt& p : r.prompts)
      for (int32_t id : p.ids)
        if (id < 0 || id >= kVocab) std::abort();
  });
  only_api_errors([&] {
    const ChatRequest r = parse_chat(body);
    if (r.messages.empty()) std::abort();
  });
  only_api_errors([&] { parse_tokenize(body); });
  only_api_errors([&] { parse_detokenize(body, kVocab); });
  // Stop strings: the first 3 bytes (when any) are a stop string, the rest arrives in pieces of
  // 1..4 bytes; the released text must be the rest up to the first occurrence.
  if (size >= 4) {
    const std::string stop = body.substr(0, 3), rest = body.substr(3);
    sinkq::StopMatcher m({stop});
    std::string out;
    for (size_t i = 0; i < rest.size();) {
      const size_t n = 1 + (uint8_t(rest[i]) % 4);
      out += m.push(rest.substr(i, n));
      i += n;
    }
    out += m.flush();
    const size_t at = rest.find(stop);
    if (out != rest.substr(0, at) || m.matched() != (at != std::string::npos)) std::abort();
  }
  return 0;
}
