// sinkq/eval/passkey.cc — passkey retrieval (passkey.h).
#include "eval/passkey.h"

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <random>

#include "core/error.h"
#include "eval/generate.h"
#include "tokenizer/tokenizer.h"

namespace sinkq {

namespace {
constexpr const char* kIntro =
    "There is an important info hidden inside a lot of irrelevant text. Find it and memorize them. I will quiz you "
    "about the important information there.";
constexpr const char* kFiller = " The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again.";
constexpr const char* kQuestion = " What is the pass key? The pass key is";
constexpr int64_t kAnswerTokens = 8;
}  // namespace

PasskeyPrompt passkey_prompt(const Tokenizer& tok, bool add_bos, int64_t length, double depth, const std::string& key) {
  SINKQ_CHECK(depth >= 0 && depth <= 1, "passkey depth {} is outside [0, 1]", depth);
  const EncodeOptions raw{.add_special = false, .parse_special = false};
  const std::vector<int32_t> intro = tok.encode(kIntro, raw), filler = tok.encode(kFiller, raw),
                             question = tok.encode(kQuestion, raw),
                             keys = tok.encode(fmt::format(" The pass key is {}. Remember it. {} is the pass key.", key, key), raw);
  const int64_t fixed = int64_t(intro.size() + keys.size() + question.size()) + (add_bos && tok.bos_id() >= 0);
  SINKQ_CHECK(length >= fixed, "a passkey prompt needs at least {} tokens (intro, key and question); {} asked", fixed,
              length);
  const int64_t n = (length - fixed) / int64_t(filler.size());
  const int64_t a = std::llround(depth * double(n));
  PasskeyPrompt p;
  if (add_bos && tok.bos_id() >= 0) p.tokens.push_back(tok.bos_id());
  p.tokens.insert(p.tokens.end(), intro.begin(), intro.end());
  for (int64_t i = 0; i < a; ++i) p.tokens.insert(p.tokens.end(), filler.begin(), filler.end());
  p.key_token = int64_t(p.tokens.size());
  p.tokens.insert(p.tokens.end(), keys.begin(), keys.end());
  for (int64_t i = a; i < n; ++i) p.tokens.insert(p.tokens.end(), filler.begin(), filler.end());
  p.tokens.insert(p.tokens.end(), question.begin(), question.end());
  return p;
}

nlohmann::json PasskeyResult::to_json() const {
  nlohmann::json c = nlohmann::json::array();
  for (const PasskeyCell& x : cells)
    c.push_back({{"length", x.length}, {"depth", x.depth}, {"correct", x.correct}, {"trials", x.trials},
                 {"accuracy", double(x.correct) / double(x.trials)}, {"keys", x.keys}, {"answers", x.answers},
                 {"prompt_tokens", x.prompt_tokens}});
  return {{"cells", c}, {"accuracy", accuracy}, {"seconds", seconds}};
}

PasskeyResult run_passkey(Forward& fwd, const Tokenizer& tok, const PasskeyOptions& opt,
                          const std::function<void(int64_t, int64_t)>& progress) {
  SINKQ_CHECK(!opt.lengths.empty() && !opt.depths.empty() && opt.trials >= 1,
              "passkey: give at least one length, one depth and one trial");
  for (int64_t L : opt.lengths)
    SINKQ_CHECK(L + kAnswerTokens <= fwd.body_capacity(),
                "passkey length {} + {} answer tokens does not fit the session's {} positions", L, kAnswerTokens,
                fwd.body_capacity());
  for (double d : opt.depths) SINKQ_CHECK(d >= 0 && d <= 1, "passkey depth {} is outside [0, 1]", d);
  const auto t0 = std::chrono::steady_clock::now();
  std::mt19937_64 rng(opt.seed);
  std::uniform_int_distribution<int> digits(10000, 99999);
  PasskeyResult res;
  const int64_t total = int64_t(opt.lengths.size() * opt.depths.size()) * opt.trials;
  int64_t done = 0, correct = 0;
  GenerateOptions go;
  go.max_new_tokens = kAnswerTokens;
  go.sampler.temperature = 0;
  go.stop_ids = opt.stop_ids;
  for (int64_t L : opt.lengths)
    for (double d : opt.depths) {
      PasskeyCell cell;
      cell.length = L;
      cell.depth = d;
      for (int t = 0; t < opt.trials; ++t) {
        const std::string key = std::to_string(digits(rng));
        const PasskeyPrompt p = passkey_prompt(tok, opt.add_bos, L, d, key);
        const GenerateResult g = generate(fwd, p.tokens, go);
        std::string answer = tok.decode(g.generated);
        const size_t b = answer.find_first_not_of(' ');
        answer = b == std::string::npos ? "" : answer.substr(b);
        const bool ok = answer.compare(0, key.size(), key) == 0;
        cell.correct += ok;
        correct += ok;
        cell.trials += 1;
        cell.keys.push_back(key);
        cell.answers.push_back(answer);
        cell.prompt_tokens.push_back(int64_t(p.tokens.size()));
        if (progress) progress(++done, total);
      }
      res.cells.push_back(std::move(cell));
    }
  res.accuracy = double(correct) / double(total);
  res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return res;
}

}  // namespace sinkq
