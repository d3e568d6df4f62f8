// sinkq/eval/chat_proxy.cc — the chat-quality proxy (chat_proxy.h).
#include "eval/chat_proxy.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <sstream>

#include "calib/calib_data.h"
#include "calib/prefix.h"
#include "core/error.h"
#include "eval/ppl.h"
#include "tokenizer/tokenizer.h"

namespace sinkq {

std::vector<ChatSample> chat_samples(const Tokenizer& tok, const ChatProxyOptions& opt) {
  SINKQ_CHECK(opt.conversations >= 1 && opt.user_words >= 1 && opt.response_tokens >= 1,
              "chat proxy: conversations, user words and response tokens must be >= 1");
  const std::string tpl = tok.chat_template();
  SINKQ_CHECK(!tpl.empty(), "the chat proxy needs the model's chat template; this tokenizer has none");
  std::string format;
  const std::vector<std::string> docs = read_documents(opt.data, &format);
  const ChatSpecials sp = ChatSpecials::of(tok);
  const std::string system_part = render_system_prompt_with(tpl, "the model's chat template", opt.system, sp);
  // As transformers tokenizes a rendered chat: special tokens parsed, no BOS added.
  const EncodeOptions special{.add_special = false, .parse_special = true},
      raw{.add_special = false, .parse_special = false};
  const std::vector<int32_t> sys = tok.encode(system_part, special);
  std::vector<ChatSample> out;
  for (size_t d = docs.size(); d-- > 0 && int(out.size()) < opt.conversations;) {
    std::istringstream in(docs[d]);
    std::vector<std::string> words;
    for (std::string w; in >> w;) words.push_back(w);
    if (int64_t(words.size()) < opt.user_words + 8) continue;
    std::string user = "Continue the following text.\n\n", response;
    for (int64_t i = 0; i < opt.user_words; ++i) user += (i ? " " : "") + words[size_t(i)];
    for (size_t i = size_t(opt.user_words); i < words.size(); ++i) response += (response.empty() ? "" : " ") + words[i];
    std::vector<int32_t> resp = tok.encode(response, raw);
    if (int64_t(resp.size()) < opt.response_tokens) continue;
    resp.resize(size_t(opt.response_tokens));
    const std::string prompt =
        render_chat(tpl, "the model's chat template", {{"system", opt.system}, {"user", user}}, true, sp);
    SINKQ_ASSERT(prompt.rfind(system_part, 0) == 0);
    ChatSample s;
    s.tokens = sys;
    const std::vector<int32_t> rest = tok.encode(prompt.substr(system_part.size()), special);
    s.tokens.insert(s.tokens.end(), rest.begin(), rest.end());
    s.system_tokens = int64_t(sys.size());
    s.response_begin = int64_t(s.tokens.size());
    s.tokens.insert(s.tokens.end(), resp.begin(), resp.end());
    out.push_back(std::move(s));
  }
  SINKQ_CHECK(int(out.size()) == opt.conversations,
              "{}: only {} of its {} documents are long enough for a conversation ({} + 8 words, {} response tokens); "
              "{} asked",
              opt.data, out.size(), docs.size(), opt.user_words, opt.response_tokens, opt.conversations);
  return out;
}

nlohmann::json ChatProxyResult::to_json() const {
  return {{"conversations", conversations}, {"tokens", tokens}, {"kld", kld}, {"top1", top1},
          {"conversation_kld", conversation_kld}, {"prefix_tokens_taken", prefix_tokens_taken},
          {"seconds", seconds}};
}

ChatProxyResult run_chat_proxy(Forward& fwd, Forward& ref, const std::vector<int32_t>& prefix,
                               const std::vector<ChatSample>& samples,
                               const std::function<void(int64_t, int64_t)>& progress) {
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t V = fwd.model().config().vocab_size;
  SINKQ_CHECK(ref.model().config().vocab_size == V, "chat proxy: the reference has another vocabulary");
  SINKQ_CHECK(fwd.prefix_size() == ref.prefix_size(), "chat proxy: the reference is behind a prefix of another size");
  ChatProxyResult r;
  double kld = 0, top1 = 0;
  for (const ChatSample& s : samples) {
    // The prefix stands for the sample's first tokens when it holds exactly them.
    size_t skip = 0;
    if (!prefix.empty() && s.tokens.size() > prefix.size() && std::equal(prefix.begin(), prefix.end(), s.tokens.begin()))
      skip = prefix.size();
    SINKQ_CHECK(int64_t(skip) < s.response_begin, "chat proxy: the prefix covers the whole prompt");
    r.prefix_tokens_taken = int64_t(skip);
    const std::span<const int32_t> body = std::span<const int32_t>(s.tokens).subspan(skip);
    const int64_t n = int64_t(body.size()), first = s.response_begin - int64_t(skip);  // body index of response[0]
    SINKQ_CHECK(n - 1 <= fwd.body_capacity() && n - 1 <= ref.body_capacity(),
                "chat proxy: a conversation of {} tokens does not fit the session's {} positions", n,
                fwd.body_capacity());
    fwd.reset();
    ref.reset();
    // Logits of positions first-1 .. n-2 predict the response tokens.
    if (first > 1) {
      fwd.step(body.first(size_t(first - 1)), false);
      ref.step(body.first(size_t(first - 1)), false);
    }
    // Two Forwards, two logit buffers: q stays valid while ref steps.
    const std::span<const float> q = fwd.step(body.subspan(size_t(first - 1), size_t(n - first)), true);
    const std::span<const float> p = ref.step(body.subspan(size_t(first - 1), size_t(n - first)), true);
    double conv = 0;
    for (int64_t j = 0; j < n - first; ++j) {
      const float* pj = p.data() + j * V;
      const float* qj = q.data() + j * V;
      conv += token_kld(pj, qj, V);
      top1 += (std::max_element(pj, pj + V) - pj) == (std::max_element(qj, qj + V) - qj);
    }
    kld += conv;
    r.tokens += n - first;
    r.conversation_kld.push_back(conv / double(n - first));
    r.conversations += 1;
    if (progress) progress(r.conversations, int64_t(samples.size()));
  }
  r.kld = kld / double(r.tokens);
  r.top1 = top1 / double(r.tokens);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace sinkq
